/* console.c - error lines and the progress display on stderr
 * (layer: base). Only the command-line tool calls these. */
#include <stdio.h>
#include <unistd.h>

#include "strata/base.h"

void strata_error_print(FILE *f, const strata_error *err)
{
	fprintf(f, "strata: error: %s\n",
		err->message[0] ? err->message : strata_status_text(err->code));
	if (err->fix[0])
		fprintf(f, "  fix: %s\n", err->fix);
}

void strata_progress_init(strata_progress *p, FILE *f, const char *label,
			  uint64_t total)
{
	*p = (strata_progress){
		.f = f, .tty = f && isatty(fileno(f)), .label = label,
		.total = total, .start_ns = strata_now_ns()};
}

static void draw(strata_progress *p, uint64_t now)
{
	const int width = 30;
	double frac = p->total ? (double)p->done / (double)p->total : 1.0;
	if (frac > 1.0)
		frac = 1.0;
	int filled = (int)(frac * width);
	double secs = (double)(now - p->start_ns) / 1e9;
	fprintf(p->f, "\r%s [", p->label);
	for (int i = 0; i < width; i++)
		fputc(i < filled ? '#' : '.', p->f);
	if (p->bytes) {
		char d[32], t[32];
		fprintf(p->f, "] %3d%% %10s of %-10s %.1fs", (int)(frac * 100),
			strata_size_format(p->done, d, sizeof d),
			strata_size_format(p->total, t, sizeof t), secs);
	} else {
		fprintf(p->f, "] %3d%% %llu/%llu %.1fs", (int)(frac * 100),
			(unsigned long long)p->done,
			(unsigned long long)p->total, secs);
	}
	fflush(p->f);
	p->last_draw_ns = now;
	p->drawn = true;
}

void strata_progress_update(strata_progress *p, uint64_t done)
{
	p->done = done;
	if (!p->tty)
		return;
	uint64_t now = strata_now_ns();
	if (now - p->start_ns < p->delay_ns)
		return;
	if (now - p->last_draw_ns >= 100000000ull || done >= p->total)
		draw(p, now);
}

void strata_progress_finish(strata_progress *p)
{
	if (!p->tty || (p->delay_ns && !p->drawn))
		return;
	draw(p, strata_now_ns());
	fputc('\n', p->f);
}
