/* util.c - hash maps, growable buffers, piece lists, UTF-8 checks and the
 * GPT-2 byte table used by the tokenizer (layer: text). */
#include <pthread.h>
#include <string.h>

#include "text/internal.h"

/* ------------------------------------------------------------------------ */
/* Hashing                                                                  */
/* ------------------------------------------------------------------------ */

/* FNV-1a then a final mix: keys are short pieces, and a hostile vocabulary
 * can at worst make probing slower, never wrong. */
static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 1099511628211ull;
	}
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	return h ^ (h >> 32);
}

static uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static size_t table_cap(size_t expect)
{
	size_t cap = 16;
	while (cap < expect * 2 + 2)
		cap <<= 1;
	return cap;
}

/* ------------------------------------------------------------------------ */
/* Bytes -> id                                                              */
/* ------------------------------------------------------------------------ */

strata_status strata__text_smap_init(text_smap *m, size_t expect,
				     strata_error *err)
{
	m->cap = table_cap(expect);
	m->count = 0;
	m->slots = strata_calloc_or_error(m->cap, sizeof *m->slots,
					  "tokenizer piece table", err);
	return m->slots ? STRATA_OK : STRATA_E_NOMEM;
}

void strata__text_smap_fini(text_smap *m)
{
	strata_free(m->slots);
	m->slots = NULL;
	m->cap = m->count = 0;
}

static strata_status smap_grow(text_smap *m, strata_error *err)
{
	size_t cap = m->cap * 2;
	struct text_sslot *s = strata_calloc_or_error(
		cap, sizeof *s, "tokenizer piece table", err);
	if (!s)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].key)
			continue;
		size_t j = m->slots[i].hash & (cap - 1);
		while (s[j].key)
			j = (j + 1) & (cap - 1);
		s[j] = m->slots[i];
	}
	strata_free(m->slots);
	m->slots = s;
	m->cap = cap;
	return STRATA_OK;
}

strata_status strata__text_smap_put(text_smap *m, const char *key,
				    size_t len, int32_t value,
				    int32_t *existing, strata_error *err)
{
	if ((m->count + 1) * 2 > m->cap) {
		strata_status st = smap_grow(m, err);
		if (st)
			return st;
	}
	uint64_t h = hash_bytes(key, len);
	size_t i = h & (m->cap - 1);
	while (m->slots[i].key) {
		struct text_sslot *s = &m->slots[i];
		if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) {
			if (existing)
				*existing = s->value;
			s->key = key; /* the last entry wins, as in llama.cpp */
			s->value = value;
			return STRATA_OK;
		}
		i = (i + 1) & (m->cap - 1);
	}
	m->slots[i] = (struct text_sslot){key, (uint32_t)len, value, h};
	m->count++;
	if (existing)
		*existing = -1;
	return STRATA_OK;
}

int32_t strata__text_smap_get(const text_smap *m, const char *key, size_t len)
{
	if (!m->cap)
		return -1;
	uint64_t h = hash_bytes(key, len);
	size_t i = h & (m->cap - 1);
	while (m->slots[i].key) {
		const struct text_sslot *s = &m->slots[i];
		if (s->hash == h && s->len == len && !memcmp(s->key, key, len))
			return s->value;
		i = (i + 1) & (m->cap - 1);
	}
	return -1;
}

/* ------------------------------------------------------------------------ */
/* Pair -> merge                                                            */
/* ------------------------------------------------------------------------ */

static uint64_t pair_key(int32_t a, int32_t b)
{
	return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

strata_status strata__text_pmap_init(text_pmap *m, size_t expect,
				     strata_error *err)
{
	m->cap = table_cap(expect);
	m->count = 0;
	m->slots = strata_calloc_or_error(m->cap, sizeof *m->slots,
					  "tokenizer merge table", err);
	if (!m->slots)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < m->cap; i++)
		m->slots[i].key = UINT64_MAX;
	return STRATA_OK;
}

void strata__text_pmap_fini(text_pmap *m)
{
	strata_free(m->slots);
	m->slots = NULL;
	m->cap = m->count = 0;
}

static strata_status pmap_grow(text_pmap *m, strata_error *err)
{
	text_pmap n;
	strata_status st = strata__text_pmap_init(&n, m->cap, err);
	if (st)
		return st;
	for (size_t i = 0; i < m->cap; i++) {
		if (m->slots[i].key == UINT64_MAX)
			continue;
		size_t j = hash_u64(m->slots[i].key) & (n.cap - 1);
		while (n.slots[j].key != UINT64_MAX)
			j = (j + 1) & (n.cap - 1);
		n.slots[j] = m->slots[i];
	}
	n.count = m->count;
	strata_free(m->slots);
	*m = n;
	return STRATA_OK;
}

strata_status strata__text_pmap_put(text_pmap *m, int32_t a, int32_t b,
				    int32_t rank, int32_t merged,
				    strata_error *err)
{
	if ((m->count + 1) * 2 > m->cap) {
		strata_status st = pmap_grow(m, err);
		if (st)
			return st;
	}
	uint64_t k = pair_key(a, b);
	size_t i = hash_u64(k) & (m->cap - 1);
	while (m->slots[i].key != UINT64_MAX) {
		if (m->slots[i].key == k)
			return STRATA_OK; /* HF keeps the first rank */
		i = (i + 1) & (m->cap - 1);
	}
	m->slots[i] = (struct text_pslot){k, rank, merged};
	m->count++;
	return STRATA_OK;
}

const struct text_pslot *strata__text_pmap_get(const text_pmap *m, int32_t a,
					       int32_t b)
{
	if (!m->cap)
		return NULL;
	uint64_t k = pair_key(a, b);
	size_t i = hash_u64(k) & (m->cap - 1);
	while (m->slots[i].key != UINT64_MAX) {
		if (m->slots[i].key == k)
			return &m->slots[i];
		i = (i + 1) & (m->cap - 1);
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Buffers and piece lists                                                  */
/* ------------------------------------------------------------------------ */

char *strata__text_memdup(const char *p, size_t n)
{
	char *c = n < SIZE_MAX ? strata_alloc(n + 1) : NULL;
	if (!c)
		return NULL;
	if (n)
		memcpy(c, p, n);
	c[n] = '\0';
	return c;
}

strata_status strata__text_buf_add(text_buf *b, const void *p, size_t n,
				   strata_error *err)
{
	if (n > SIZE_MAX - b->len - 1)
		return strata_fail(err, STRATA_E_OVERFLOW, "use shorter text",
				   "text buffer size overflows");
	if (b->len + n + 1 > b->cap) {
		void *d = b->data;
		strata_status st = strata_grow(&d, &b->cap, b->len + n + 1, 1,
					       "text buffer", err);
		if (st)
			return st;
		b->data = d;
	}
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return STRATA_OK;
}

void strata__text_buf_fini(text_buf *b)
{
	strata_free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

strata_status strata__text_list_push(text_list *l, const char *p, size_t n,
				     int32_t id, bool at_start,
				     strata_error *err)
{
	if (l->count == l->cap) {
		void *items = l->items;
		strata_status st = strata_grow(&items, &l->cap, l->count + 1,
					       sizeof *l->items, "text pieces",
					       err);
		if (st)
			return st;
		l->items = items;
	}
	size_t off = l->arena.len;
	strata_status st = strata__text_buf_add(&l->arena, p, n, err);
	if (st)
		return st;
	l->items[l->count++] = (text_piece){off, n, id, at_start};
	return STRATA_OK;
}

void strata__text_list_clear(text_list *l)
{
	l->count = 0;
	l->arena.len = 0;
}

void strata__text_list_fini(text_list *l)
{
	strata__text_buf_fini(&l->arena);
	strata_free(l->items);
	l->items = NULL;
	l->count = l->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */
/* ------------------------------------------------------------------------ */

/* The well-formed byte sequences of Unicode Table 3-7: the allowed range of
 * the second byte depends on the first. */
static bool second_ok(unsigned char c0, unsigned char c1)
{
	if (c0 == 0xE0)
		return c1 >= 0xA0 && c1 <= 0xBF;
	if (c0 == 0xED)
		return c1 >= 0x80 && c1 <= 0x9F;
	if (c0 == 0xF0)
		return c1 >= 0x90 && c1 <= 0xBF;
	if (c0 == 0xF4)
		return c1 >= 0x80 && c1 <= 0x8F;
	return c1 >= 0x80 && c1 <= 0xBF;
}

static size_t seq_len(unsigned char c0)
{
	if (c0 < 0x80)
		return 1;
	if (c0 >= 0xC2 && c0 <= 0xDF)
		return 2;
	if (c0 >= 0xE0 && c0 <= 0xEF)
		return 3;
	if (c0 >= 0xF0 && c0 <= 0xF4)
		return 4;
	return 0;
}

size_t strata__utf8_partial_len(const unsigned char *s, size_t n)
{
	if (!n)
		return 0;
	size_t need = seq_len(s[0]);
	if (!need)
		return 0;
	size_t i = 1;
	while (i < need && i < n) {
		bool ok = i == 1 ? second_ok(s[0], s[1])
				 : (s[i] >= 0x80 && s[i] <= 0xBF);
		if (!ok)
			break;
		i++;
	}
	return i;
}

size_t strata__utf8_valid_len(const unsigned char *s, size_t n)
{
	size_t need = n ? seq_len(s[0]) : 0;
	if (!need || need > n)
		return 0;
	return strata__utf8_partial_len(s, n) == need ? need : 0;
}

strata_status strata__utf8_lossy(text_buf *b, const char *s, size_t n,
				 strata_error *err)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, run = 0;
	while (i < n) {
		size_t k = strata__utf8_valid_len(u + i, n - i);
		if (k) {
			i += k;
			run += k;
			continue;
		}
		strata_status st = strata__text_buf_add(b, s + i - run, run, err);
		if (st)
			return st;
		run = 0;
		size_t bad = strata__utf8_partial_len(u + i, n - i);
		i += bad ? bad : 1;
		st = strata__text_buf_add(b, "\xEF\xBF\xBD", 3, err);
		if (st)
			return st;
	}
	return strata__text_buf_add(b, s + n - run, run, err);
}

/* ------------------------------------------------------------------------ */
/* GPT-2 byte table                                                         */
/* ------------------------------------------------------------------------ */

/* Printable Latin-1 bytes stand for themselves; the other 68 bytes take
 * the code points from U+0100 upward in byte order (GPT-2's encoder.py). */
#define SELF(b) (((b) >= 0x21 && (b) <= 0x7E) || ((b) >= 0xA1 && (b) <= 0xAC) \
		 || ((b) >= 0xAE))

static uint16_t bl_cp[256];
static int16_t bl_back[324]; /* code points 0 .. 0x143 */
static pthread_once_t bl_once = PTHREAD_ONCE_INIT;

static void bl_init(void)
{
	uint16_t next = 256;
	for (int i = 0; i < 324; i++)
		bl_back[i] = -1;
	for (int b = 0; b < 256; b++) {
		bl_cp[b] = SELF(b) ? (uint16_t)b : next++;
		bl_back[bl_cp[b]] = (int16_t)b;
	}
}

uint32_t strata__bytelevel_cp(unsigned char b)
{
	pthread_once(&bl_once, bl_init);
	return bl_cp[b];
}

int strata__bytelevel_byte(uint32_t cp)
{
	pthread_once(&bl_once, bl_init);
	return cp < 324 ? bl_back[cp] : -1;
}
