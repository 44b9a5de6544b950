/* cublas_load.c - cuBLAS opened when the first CUDA compute context is
 * made, not when the program starts (layer: backend).
 *
 * Linking libcublas makes every start of the tool load it and its
 * libcublasLt (about 0.3 s and 210 MiB before main, measured on the
 * development machine), `strata --version` included; the CUDA runtime
 * itself costs nothing measurable. So cuBLAS is opened with dlopen here,
 * once, and its few functions are called through strata__cublas.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "backend/cuda/cuda_internal.h"

/* cublas_v2.h maps the names to their _v2 symbols: resolve what the
 * macros name. */
#define SYMBOL_NAME(f) SYMBOL_TEXT(f)
#define SYMBOL_TEXT(f) #f

strata_cublas_api strata__cublas;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[STRATA_ERROR_MESSAGE_BYTES];

/* The soname of the toolkit strata was built with, from the loader's path
 * first, then from the toolkit's own folder (a build that was not
 * installed into the loader's path still runs). */
static void *open_library(void)
{
	char name[64], path[1024];
	snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
#ifdef STRATA_CUDA_LIBRARY_DIR
	if (!h) {
		snprintf(path, sizeof path, "%s/%s", STRATA_CUDA_LIBRARY_DIR,
			 name);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
#else
	(void)path;
#endif
	if (!h)
		snprintf(failure, sizeof failure, "cannot open %s: %s", name,
			 dlerror());
	return h;
}

#define RESOLVE(h, field, f)                                                   \
	(strata__cublas.field = (__typeof__(&f))dlsym(h, SYMBOL_NAME(f)))

static void load(void)
{
	void *h = open_library();
	if (!h)
		return;
	bool all = RESOLVE(h, create, cublasCreate) &&
		   RESOLVE(h, destroy, cublasDestroy) &&
		   RESOLVE(h, set_stream, cublasSetStream) &&
		   RESOLVE(h, set_workspace, cublasSetWorkspace) &&
		   RESOLVE(h, set_math_mode, cublasSetMathMode) &&
		   RESOLVE(h, sgemm, cublasSgemm) &&
		   RESOLVE(h, gemm_ex, cublasGemmEx) &&
		   RESOLVE(h, status_name, cublasGetStatusName) &&
		   RESOLVE(h, status_string, cublasGetStatusString);
	if (!all) {
		snprintf(failure, sizeof failure,
			 "libcublas.so.%d lacks a function strata calls: %s",
			 CUBLAS_VER_MAJOR, dlerror());
		strata__cublas = (strata_cublas_api){0};
		dlclose(h);
		return;
	}
	strata__cublas.loaded = true; /* the library stays open for good */
}

strata_status strata__cublas_load(strata_error *err)
{
	pthread_once(&once, load);
	if (strata__cublas.loaded)
		return STRATA_OK;
	return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
			   "install the CUDA toolkit's cuBLAS of this major "
			   "version, or add its folder to LD_LIBRARY_PATH; "
			   "or run with --device cpu",
			   "%s", failure);
}
