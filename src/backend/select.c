/* select.c - the kinds of backend this build has, and the backend named by
 * a kind or by --device ("cpu", "cuda", "cuda:N") (layer: backend).
 *
 * One table lists the kinds built in; a kind strata knows but was built
 * without (cuda where nvcc was missing) is simply absent from it and says
 * so when asked for, so callers need neither #ifdef nor stubs.
 */
#include <string.h>

#include "strata/backend.h"
/* declarations and constants only: its functions exist with CUDA alone */
#include "strata/backend_cuda.h"

typedef struct backend_kind {
	const char *name;
	uint32_t (*device_count)(void);
	strata_status (*create)(uint32_t device,
				const strata_backend_cpu_options *cpu_opt,
				strata_backend **out, strata_error *err);
} backend_kind;

static uint32_t cpu_count(void)
{
	return 1;
}

static strata_status cpu_create(uint32_t device,
				const strata_backend_cpu_options *cpu_opt,
				strata_backend **out, strata_error *err)
{
	if (device != 0)
		return strata_fail(err, STRATA_E_USAGE, "use --device cpu",
				   "CPU device %u asked for; there is one",
				   device);
	return strata_backend_cpu_create(cpu_opt, out, err);
}

#ifdef STRATA_HAVE_CUDA
static strata_status cuda_create(uint32_t device,
				 const strata_backend_cpu_options *cpu_opt,
				 strata_backend **out, strata_error *err)
{
	(void)cpu_opt;
	strata_backend_cuda_options o = {.device = device};
	return strata_backend_cuda_create(&o, out, err);
}
#endif

static const backend_kind kinds[] = {
	{"cpu", cpu_count, cpu_create},
#ifdef STRATA_HAVE_CUDA
	{"cuda", strata_backend_cuda_device_count, cuda_create},
#endif
};

/* Kinds strata has code for, built here or not, the device memory a
 * compute context takes at least on each, what the runtime takes after it
 * as kernels first run, and the weight types its kernel table takes (plans
 * for another machine's GPUs need them where no GPU code is built). */
static const struct {
	const char *name;
	uint64_t compute_bytes, runtime_bytes;
	uint32_t weight_types;
} known[] = {
	{"cpu", 0, 0, STRATA_CPU_WEIGHT_TYPES},
	{"cuda", STRATA_CUDA_COMPUTE_DEVICE_BYTES,
	 STRATA_CUDA_RUNTIME_DEVICE_BYTES, STRATA_CUDA_WEIGHT_TYPES},
};

/* ------------------------------------------------------------------------ */

static const backend_kind *find(const char *name)
{
	for (size_t i = 0; name && i < sizeof kinds / sizeof *kinds; i++)
		if (strcmp(kinds[i].name, name) == 0)
			return &kinds[i];
	return NULL;
}

/* Index of `name` in known[], or -1. */
static int known_index(const char *name)
{
	for (size_t i = 0; name && i < sizeof known / sizeof *known; i++)
		if (strcmp(known[i].name, name) == 0)
			return (int)i;
	return -1;
}

static strata_status bad_name(const char *device, strata_error *err)
{
	char shown[64];
	strata_escape(shown, sizeof shown, device, strlen(device));
	return strata_fail(err, STRATA_E_USAGE,
			   "use --device cpu, cuda or cuda:N (N a device index)",
			   "unknown device '%s'", shown);
}

/* ------------------------------------------------------------------------ */

uint32_t strata_backend_device_count(const char *kind)
{
	const backend_kind *k = find(kind);
	return k ? k->device_count() : 0;
}

bool strata_backend_has_kind(const char *kind)
{
	return find(kind) != NULL;
}

uint64_t strata_backend_compute_bytes(const char *kind)
{
	int i = known_index(kind);
	return i < 0 ? 0 : known[i].compute_bytes;
}

uint64_t strata_backend_runtime_bytes(const char *kind)
{
	int i = known_index(kind);
	return i < 0 ? 0 : known[i].runtime_bytes;
}

uint32_t strata_backend_weight_types(const char *kind)
{
	int i = known_index(kind);
	return i < 0 ? 0 : known[i].weight_types;
}

strata_status strata_backend_create(const char *kind, uint32_t device,
				    const strata_backend_cpu_options *cpu_opt,
				    strata_backend **out, strata_error *err)
{
	if (!kind || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "backend asked for with a NULL kind or output");
	const backend_kind *k = find(kind);
	if (k)
		return k->create(device, cpu_opt, out, err);
	if (known_index(kind) < 0)
		return bad_name(kind, err);
	return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
			   "run with --device cpu, or rebuild strata where nvcc is installed",
			   "this strata was built without %s", kind);
}

strata_status strata_backend_create_named(const char *device,
					  const strata_backend_cpu_options *cpu_opt,
					  strata_backend **out,
					  strata_error *err)
{
	if (!device || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "backend asked for with a NULL name or output");
	if (strcmp(device, "cpu") == 0)
		return strata_backend_create("cpu", 0, cpu_opt, out, err);
	if (strncmp(device, "cuda", 4) != 0)
		return bad_name(device, err);
	uint32_t index = 0;
	const char *p = device + 4;
	if (*p == ':') {
		p++;
		/* Decimal digits only, at most 9: no sign, no overflow. */
		size_t len = strspn(p, "0123456789");
		if (len == 0 || len > 9 || p[len] != '\0')
			return bad_name(device, err);
		for (size_t i = 0; i < len; i++)
			index = index * 10 + (uint32_t)(p[i] - '0');
	} else if (*p != '\0') {
		return bad_name(device, err);
	}
	return strata_backend_create("cuda", index, cpu_opt, out, err);
}
