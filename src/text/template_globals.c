/* template_globals.c - the functions a chat template can call by name:
 * range (capped as Jinja2's sandbox caps it), namespace, dict,
 * raise_exception and strftime_now as transformers defines them, and
 * loop.cycle (layer: text). Nothing here reaches a file, the environment
 * or the network; strftime_now reads the clock the render was given. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "text/template_internal.h"

#define ARGS                                                                  \
	tctx *c, tfunc *self, uint32_t pos, const tv *args, size_t n,        \
		const char *const *kw, const tv *kwv, size_t nkw, tv *out

/* Jinja2's sandbox: MAX_RANGE. */
#define MAX_RANGE 100000

static int g_range(ARGS)
{
	(void)self, (void)kw, (void)kwv;
	if (nkw || n < 1 || n > 3)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"range takes 1 to 3 integer arguments");
	int64_t v[3] = {0, 0, 1};
	for (size_t i = 0; i < n; i++) {
		if (args[i].type != TV_INT && args[i].type != TV_BOOL)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"'%s' object cannot be interpreted as "
					"an integer", tv_type_name(&args[i]));
		v[n == 1 ? 1 : i] = args[i].type == TV_INT ? args[i].i : args[i].b;
	}
	if (!v[2])
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"range() arg 3 must not be zero");
	double count = v[2] > 0 ? ((double)v[1] - (double)v[0]) / (double)v[2]
				: ((double)v[0] - (double)v[1]) / (double)-v[2];
	if (count > MAX_RANGE)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT, "range "
				"too big: the sandbox blocks ranges larger than "
				"%d", MAX_RANGE);
	if (tv_list_new(c->a, count > 0 ? (size_t)count + 1 : 0, out))
		return tpl_fail_alloc(c, pos);
	for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
		out->l->items[out->l->n++] = tv_int(i);
	return tpl_step(c, pos, out->l->n);
}

/* namespace(a=1, ...) and dict(a=1, ...); a positional dict seeds both. */
static int g_namespace(ARGS)
{
	bool ns = !strcmp(self->name, "namespace");
	if (tv_dict_new(c->a, nkw, out))
		return tpl_fail_alloc(c, pos);
	if (n > 1 || (n == 1 && args[0].type != TV_DICT))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"%s takes keyword arguments or one dict",
				self->name);
	for (size_t i = 0; n == 1 && i < args[0].d->n; i++)
		if (tv_dict_set(c->a, out, args[0].d->keys[i], args[0].d->vals[i]))
			return tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < nkw; i++)
		if (tv_dict_set(c->a, out, tv_strref(kw[i], strlen(kw[i])), kwv[i]))
			return tpl_fail_alloc(c, pos);
	if (ns)
		out->type = TV_NS;
	return 0;
}

/* transformers: raise TemplateError(message). The message is the error's
 * whole text, so a server can hand it to its client unchanged. */
static int g_raise(ARGS)
{
	(void)self, (void)kw, (void)kwv, (void)nkw, (void)out;
	tv msg = tv_strref("", 0);
	if (n >= 1 && tpl_to_str(c, pos, &args[0], &msg))
		return -1;
	if (c->failed)
		return -1;
	c->failed = true;
	uint32_t line, col;
	tpl_line_col(c->t->src, c->t->src_len, pos, &line, &col);
	strata_fail(c->err, STRATA_E_TEXT_TEMPLATE_RAISED, "", "%.*s",
		    (int)(msg.s.n > 500 ? 500 : msg.s.n), msg.s.p);
	strata_error_set_fix(c->err, "the model's chat template refuses this "
			     "conversation (raise_exception at template line "
			     "%u): change the messages as it says", line);
	return -1;
}

/* transformers: datetime.now().strftime(format); here the render's clock. */
static int g_strftime(ARGS)
{
	(void)self, (void)kw, (void)kwv, (void)nkw;
	if (n != 1 || args[0].type != TV_STR)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"strftime_now takes one format string");
	if (args[0].s.n > 256)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT,
				"strftime_now's format is longer than 256 bytes");
	char fmt[260], buf[2048];
	memcpy(fmt, args[0].s.p, args[0].s.n);
	fmt[args[0].s.n] = '\0';
	if (memchr(args[0].s.p, '\0', args[0].s.n))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"strftime_now's format holds a NUL byte");
	size_t len = fmt[0] ? strftime(buf, sizeof buf, fmt, &c->now) : 0;
	return tv_str_copy(c->a, buf, len, out) ? tpl_fail_alloc(c, pos) : 0;
}

static int g_cycle(ARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	if (!n)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"loop.cycle needs at least one value");
	*out = args[self->self.loop->index0 % (int64_t)n];
	return 0;
}

static tfunc globals[] = {
	{.name = "range", .call = g_range},
	{.name = "namespace", .call = g_namespace},
	{.name = "dict", .call = g_namespace},
	{.name = "raise_exception", .call = g_raise},
	{.name = "strftime_now", .call = g_strftime},
};

bool tpl_global(const char *name, size_t n, tv *out)
{
	for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
		if (strlen(globals[i].name) == n && !memcmp(globals[i].name, name, n)) {
			*out = (tv){.type = TV_FUNC};
			out->fn = &globals[i];
			return true;
		}
	return false;
}

bool tpl_loop_method(tctx *c, const tv *loop, const char *name, size_t n,
		     tv *out)
{
	if (n != 5 || memcmp(name, "cycle", 5))
		return false;
	tfunc *fn = tpl_alloc(c->a, sizeof *fn);
	if (!fn) {
		tpl_fail_alloc(c, 0);
		*out = tv_undef();
		return true;
	}
	memset(fn, 0, sizeof *fn);
	fn->name = "cycle";
	fn->call = g_cycle;
	fn->self = *loop;
	*out = (tv){.type = TV_FUNC};
	out->fn = fn;
	return true;
}
