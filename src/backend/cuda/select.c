/* select.c - the backend named by --device: "cpu", "cuda" or "cuda:N", in
 * every build (without CUDA the cuda names say so) (layer: backend). */
#include <string.h>

#include "strata/backend.h"

static strata_status bad_name(const char *device, strata_error *err)
{
	char shown[64];
	strata_escape(shown, sizeof shown, device, strlen(device));
	return strata_fail(err, STRATA_E_USAGE,
			   "use --device cpu, cuda or cuda:N (N a device index)",
			   "unknown device '%s'", shown);
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
		return strata_backend_cpu_create(cpu_opt, out, err);
	if (strncmp(device, "cuda", 4) != 0)
		return bad_name(device, err);
	strata_backend_cuda_options opt = {.device = 0};
	const char *p = device + 4;
	if (*p == ':') {
		p++;
		/* Decimal digits only, at most 9: no sign, no overflow. */
		size_t len = strspn(p, "0123456789");
		if (len == 0 || len > 9 || p[len] != '\0')
			return bad_name(device, err);
		uint32_t n = 0;
		for (size_t i = 0; i < len; i++)
			n = n * 10 + (uint32_t)(p[i] - '0');
		opt.device = n;
	} else if (*p != '\0') {
		return bad_name(device, err);
	}
	return strata_backend_cuda_create(&opt, out, err);
}
