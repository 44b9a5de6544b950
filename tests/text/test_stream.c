/* test_stream.c - the streaming decoder: the text of ids generated
 * after a prompt is decode(prompt + generated) with decode(prompt)
 * removed, for every tokenizer kind and every prompt split, streamed with
 * only what still depends on later tokens held back (layer: text).
 *
 * References: Hugging Face tokenizers' own decode of every prefix
 * (tests/data/continuation, tools/make_continuation_testdata.py), the whole
 * decoder (itself tested against HF in test_hf.c) for the synthetic
 * decoder chains and random ids, and llama.cpp's printing of generated
 * tokens (each token's piece, concatenated) for GGUF vocabularies. */
#include <dirent.h>

#include <utf8proc.h>

#include "text/internal.h"
#include "text/text_fixture.h"
#include "text/stream_oracle.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static int32_t id_of(const strata_tokenizer *t, const char *piece)
{
	int32_t id = strata_tokenizer_find(t, piece, strlen(piece));
	if (id < 0)
		fail_msg("no piece '%s'", piece);
	return id;
}

/* Pushes id and checks the text that comes out. */
static void push_expect(strata_text_stream *s, int32_t id, const char *want)
{
	const char *p;
	size_t n;
	strata_error err;
	assert_int_equal(strata_text_stream_push(s, id, &p, &n, &err), STRATA_OK);
	if (n != strlen(want) || memcmp(p, want, n))
		fail_msg("push %d gave '%.*s', expected '%s'", id, (int)n, p,
			 want);
}

static void finish_expect(strata_text_stream *s, const char *want)
{
	const char *p;
	size_t n;
	strata_error err;
	assert_int_equal(strata_text_stream_finish(s, &p, &n, &err), STRATA_OK);
	if (n != strlen(want) || memcmp(p, want, n))
		fail_msg("finish gave '%.*s', expected '%s'", (int)n, p, want);
}

/* Every split of ids, both skip modes, through the oracle; returns the
 * number of failures (printed). */
static int check_all_splits(const strata_tokenizer *t, const char *what,
			    const int32_t *ids, size_t n)
{
	int bad = 0;
	for (int skip = 0; skip < 2; skip++)
		for (size_t k = 0; k <= n; k++) {
			const char *why = so_check(t, ids, n, k, skip);
			if (why) {
				fprintf(stderr, "%s: split %zu of %zu (skip %d): "
					"%s\n", what, k, n, skip, why);
				tt_print_ids("ids", ids, n);
				bad++;
			}
		}
	return bad;
}

/* ------------------------------------------------------------------------ */
/* What strata run prints                                                   */
/* ------------------------------------------------------------------------ */

/* issue 24: "Once upon a" + "▁time" printed "time"; the continuation keeps
 * its space, from tokenizer.json and from the GGUF alike. */
static void test_continuation_keeps_its_first_space(void **state)
{
	(void)state;
	static const char *const models[] = {
		"models/stories260K", "models/stories260K/stories260K.gguf"};
	for (size_t m = 0; m < 2; m++) {
		strata_tokenizer *t = tt_load(models[m]);
		assert_non_null(t);
		strata_error err;
		int32_t *prompt, *whole;
		size_t np, nw;
		static const char text[] = "Once upon a time, there was";
		assert_int_equal(strata_tokenizer_encode(t, text, 11, true,
							 &prompt, &np, &err), 0);
		assert_int_equal(strata_tokenizer_encode(t, text, sizeof text - 1,
							 true, &whole, &nw, &err),
				 0);
		assert_true(nw > np);
		assert_memory_equal(prompt, whole, np * sizeof *prompt);
		assert_int_equal(whole[np], id_of(t, "\xe2\x96\x81time"));
		size_t len;
		strata_status st;
		bool bad;
		char *s = so_stream(t, whole, nw, np, true, &len, &st, &bad);
		assert_non_null(s);
		assert_string_equal(s, " time, there was");
		free(s);
		/* Without a prompt the same tokens are a whole text, whose
		 * first space the decoder strips. */
		s = so_stream(t, whole + np, nw - np, 0, true, &len, &st, &bad);
		assert_string_equal(s, "time, there was");
		free(s);
		strata_free(prompt);
		strata_free(whole);
		strata_tokenizer_destroy(t);
	}
}

/* ------------------------------------------------------------------------ */
/* Every tokenizer, every split                                             */
/* ------------------------------------------------------------------------ */

static const char *const sources[] = {
	"models/stories260K",
	"models/stories260K/stories260K.gguf",
	"tests/data/tokenizers/hf-gpt2",
	"tests/data/tokenizers/hf-llama2-spm-bpe",
	"tests/data/tokenizers/tiny/spm.json",
	"tests/data/tokenizers/tiny/meta.json",
	"tests/data/tokenizers/tiny/bytelevel.json",
	"tests/data/tokenizers/generated/spm-meta.tokenizer.json",
	"tests/data/tokenizers/generated/spm-bpe.tokenizer.json",
	"tests/data/tokenizers/generated/bytelevel-l3.tokenizer.json",
	"tests/data/tokenizers/generated/falconish.tokenizer.json",
	"tests/data/tokenizers/generated/wsplit.tokenizer.json",
	"tests/data/vocab/ggml-vocab-llama-spm.gguf",
	"tests/data/vocab/ggml-vocab-gpt-2.gguf",
	"tests/data/vocab/ggml-vocab-falcon.gguf",
	"tests/data/vocab/ggml-vocab-mpt.gguf",
	"tests/data/vocab/ggml-vocab-refact.gguf",
	"tests/data/vocab/ggml-vocab-deepseek-llm.gguf",
};

/* A continuation starting with a space, a byte-fallback character split
 * over tokens, multi-byte characters, special tokens written in the text,
 * spaces and newlines at either end. */
static const char *const texts[] = {
	"Once upon a time, there was a little girl.",
	" leading space and trailing space ",
	"  two spaces\n\nand\tnewlines\n",
	/* one string, cut where a hex escape would swallow the "5" */
	("caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac" "5 \xe6\x97\xa5\xe6\x9c\xac"
	 "\xe8\xaa\x9e \xf0\x9f\x98\x80\xf0\x9f\x98\x81!"),
	"emoji\xf0\x9f\xa6\x99\xf0\x9f\x90\x89 then text",
	"<s> special </s> in <|endoftext|> text <unk>",
	("\xea\xb0\x80\xeb\x82\x98\xeb\x8b\xa4 \xd0\x9f\xd1\x80\xd0\xb8"
	 "\xd0\xb2\xd0\xb5\xd1\x82 \xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1"),
	"a",
	" ",
	"",
};

static void test_every_tokenizer_continues_as_it_decodes(void **state)
{
	(void)state;
	int bad = 0, cases = 0;
	for (size_t i = 0; i < sizeof sources / sizeof *sources; i++) {
		strata_tokenizer *t = tt_load(sources[i]);
		assert_non_null(t);
		for (size_t j = 0; j < sizeof texts / sizeof *texts; j++)
			for (int special = 0; special < 2; special++) {
				int32_t *ids;
				size_t n;
				strata_error err;
				assert_int_equal(strata_tokenizer_encode(
							 t, texts[j],
							 strlen(texts[j]),
							 special, &ids, &n, &err),
						 0);
				bad += check_all_splits(t, sources[i], ids, n);
				cases++;
				strata_free(ids);
			}
		strata_tokenizer_destroy(t);
	}
	fprintf(stderr, "stream: %d texts x tokenizers, every split, %d bad\n",
		cases, bad);
	assert_int_equal(bad, 0);
}

/* Random ids, byte tokens and special tokens favoured (runs that end
 * invalid, specials in the middle): the stream is still the whole decode
 * at every split. */
static void test_random_ids_continue_as_they_decode(void **state)
{
	(void)state;
	uint64_t x = 0x9E3779B97F4A7C15ull;
	int bad = 0;
	for (size_t i = 0; i < sizeof sources / sizeof *sources; i++) {
		strata_tokenizer *t = tt_load(sources[i]);
		assert_non_null(t);
		uint32_t v = strata_tokenizer_vocab_count(t);
		for (int r = 0; r < 40; r++) {
			int32_t ids[24];
			size_t n = (size_t)(r % 24);
			for (size_t k = 0; k < n; k++) {
				x = x * 6364136223846793005ull +
				    1442695040888963407ull;
				uint32_t y = (uint32_t)(x >> 33);
				/* low ids: specials and byte tokens */
				ids[k] = (int32_t)(y % 3 ? y % v : y % 300 % v);
				while (!strata_tokenizer_piece(t, ids[k], NULL))
					ids[k] = (ids[k] + 1) % (int32_t)v;
			}
			bad += check_all_splits(t, sources[i], ids, n);
		}
		strata_tokenizer_destroy(t);
	}
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Hugging Face's own decode of every prefix                                */
/* ------------------------------------------------------------------------ */

/* One case of a reference file: strata's whole decode of every prefix is
 * HF's, and the stream continuing every prefix gives HF's whole text from
 * len(HF's prefix text) on (or, where HF's prefix text is not a prefix,
 * from the first character that differs). */
static int check_hf_case(const strata_tokenizer *t, const char *file,
			 const json_t *c, int *compared)
{
	const json_t *jids = json_object_get(c, "ids");
	const json_t *pre = json_object_get(c, "prefix_text");
	const char *what = json_string_value(json_object_get(c, "text"));
	size_t n = json_array_size(jids);
	assert_int_equal(json_array_size(pre), n + 1);
	int32_t *ids = malloc((n + 1) * sizeof *ids);
	for (size_t i = 0; i < n; i++)
		ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
	const char *whole = json_string_value(json_array_get(pre, n));
	size_t wn = json_string_length(json_array_get(pre, n));
	int bad = 0;
	for (size_t k = 0; k <= n; k++) {
		const char *p = json_string_value(json_array_get(pre, k));
		size_t pn = json_string_length(json_array_get(pre, k));
		char *d;
		size_t dn;
		strata_error err;
		assert_int_equal(strata_tokenizer_decode(t, ids, k, false, &d, &dn,
							 &err), 0);
		if (dn != pn || memcmp(d, p, pn)) {
			fprintf(stderr, "%s: '%s' decode of %zu ids: '%s', HF "
				"'%s'\n", file, what, k, d, p);
			bad++;
		}
		strata_free(d);
		size_t off = so_continuation_start(p, pn, whole, wn), len;
		strata_status st;
		bool bad_piece;
		char *s = so_stream(t, ids, n, k, false, &len, &st, &bad_piece);
		if (!s || len != wn - off || memcmp(s, whole + off, len)) {
			fprintf(stderr, "%s: '%s' split %zu: got '%s', HF "
				"'%s'\n", file, what, k, s ? s : "(failed)",
				whole + off);
			bad++;
		}
		*compared += 1;
		free(s);
	}
	free(ids);
	return bad;
}

static void test_continuations_match_hugging_face(void **state)
{
	(void)state;
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/tests/data/continuation", STRATA_SOURCE_DIR);
	DIR *d = opendir(dir);
	assert_non_null(d);
	int bad = 0, files = 0, compared = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".json"))
			continue;
		char rel[512];
		snprintf(rel, sizeof rel, "tests/data/continuation/%s", e->d_name);
		size_t len = 0;
		char *s = tt_read(rel, &len);
		assert_non_null(s);
		json_t *j = json_loadb(s, len, 0, NULL);
		free(s);
		assert_non_null(j);
		strata_tokenizer *t = tt_load(json_string_value(
			json_object_get(j, "tokenizer")));
		assert_non_null(t);
		const json_t *cases = json_object_get(j, "cases");
		assert_true(json_array_size(cases) > 0);
		for (size_t c = 0; c < json_array_size(cases); c++)
			bad += check_hf_case(t, rel, json_array_get(cases, c),
					     &compared);
		files++;
		strata_tokenizer_destroy(t);
		json_decref(j);
	}
	closedir(d);
	fprintf(stderr, "HF: %d files, %d splits, %d bad\n", files, compared,
		bad);
	assert_true(files >= 11);
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* llama.cpp's printing for GGUF vocabularies                               */
/* ------------------------------------------------------------------------ */

/* What llama.cpp prints for generated ids: each token's piece in turn
 * (llama: "▁" as a space, <0xNN> as its byte; gpt2: the byte-level bytes;
 * control tokens print nothing). */
static size_t llama_cpp_text(const strata_tokenizer *t, bool spm,
			     const int32_t *ids, size_t n, char *out)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		size_t pn;
		const char *p = strata_tokenizer_piece(t, ids[i], &pn);
		if (strata_tokenizer_is_special(t, ids[i]))
			continue;
		int b = strata__text_byte_token(p, pn);
		text_buf tb = {0};
		if (spm && b >= 0) {
			out[len++] = (char)b;
			continue;
		}
		strata_error err;
		assert_int_equal(spm ? strata__text_replace(p, pn, "\xe2\x96\x81",
							    3, " ", 1, &tb, &err)
				     : strata__text_bytelevel(p, pn, &tb, &err),
				 0);
		memcpy(out + len, tb.data, tb.len);
		len += tb.len;
		strata__text_buf_fini(&tb);
	}
	return len;
}

static void test_gguf_continuations_print_as_llama_cpp(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		bool spm;
	} vocabs[] = {{"llama-spm", true}, {"gpt-2", false}, {"falcon", false},
		      {"mpt", false}, {"refact", false}, {"deepseek-llm", false}};
	int compared = 0, bad = 0;
	for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
		char rel[256];
		snprintf(rel, sizeof rel, "tests/data/vocab/ggml-vocab-%s.gguf",
			 vocabs[v].name);
		strata_tokenizer *t = tt_load(rel);
		strcat(rel, ".inp");
		char *inp = tt_read(rel, NULL);
		assert_non_null(t);
		assert_non_null(inp);
		for (char *s = inp, *e; (e = strstr(s, "\n__ggml_vocab_test__\n"));
		     s = e + 21) {
			int32_t *ids;
			size_t n;
			strata_error err;
			assert_int_equal(strata_tokenizer_encode(t, s, (size_t)(e - s),
								 true, &ids, &n,
								 &err),
					 0);
			for (size_t k = 1; k < n; k++) {
				char *p, *want = malloc(8 * (size_t)(e - s) + 64);
				size_t pn, wn = llama_cpp_text(t, vocabs[v].spm,
							       ids + k, n - k, want);
				assert_int_equal(strata_tokenizer_decode(
							 t, ids, k, true, &p, &pn,
							 &err),
						 0);
				size_t len;
				strata_status st;
				bool bp;
				char *got = so_stream(t, ids, n, k, true, &len, &st,
						      &bp);
				/* Where the prompt ends inside a character llama.cpp
				 * prints raw bytes; strata the completed character. */
				if (pn && so_valid_utf8(want, wn) &&
				    so_check(t, ids, n, k, true) == NULL &&
				    !(pn >= 3 && !memcmp(p + pn - 3, "\xef\xbf\xbd", 3))) {
					compared++;
					if (!got || len != wn || memcmp(got, want, wn)) {
						fprintf(stderr, "%s split %zu: '%s' vs "
							"llama.cpp '%.*s'\n", rel, k,
							got, (int)wn, want);
						bad++;
					}
				}
				free(got);
				free(want);
				strata_free(p);
			}
			bad += check_all_splits(t, rel, ids, n);
			strata_free(ids);
		}
		free(inp);
		strata_tokenizer_destroy(t);
	}
	fprintf(stderr, "gguf: %d splits compared with llama.cpp's text, %d "
		"bad\n", compared, bad);
	assert_true(compared > 1000);
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Synthetic decoder chains                                                 */
/* ------------------------------------------------------------------------ */

/* Pieces of the synthetic vocabulary: id i is pieces[i]; "<s>" is a
 * special added token. The byte-level ones stand for E2 96 81 ("▁" split
 * in three), a space, C3 and A9 ("é" split in two). */
static const char *const pieces[] = {
	"<unk>", "<s>", "a", "b", " ", "\xe2\x96\x81", "ab", "\xe2\x96\x81" "a",
	"a\xe2\x96\x81", "<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "<0xFF>",
	"<0xC3>", "<0xA9>", "<0x20>", "<0x", "4", "1>", "<0x4", "\xc3\xa9",
	"\xe2\x82\xac", "  ", NULL /* byte-level pieces follow */,
};
#define N_PLAIN (sizeof pieces / sizeof *pieces - 1)
static const unsigned char bl_bytes[] = {0xE2, 0x96, 0x81, 0x20, 0xC3, 0xA9};
#define N_PIECES (N_PLAIN + sizeof bl_bytes)

static strata_tokenizer *synthetic(const char *decoder)
{
	json_t *vocab = json_object();
	for (size_t i = 0; i < N_PIECES; i++) {
		char b[8];
		if (i < N_PLAIN) {
			json_object_set_new(vocab, pieces[i],
					    json_integer((json_int_t)i));
			continue;
		}
		uint32_t cp = strata__bytelevel_cp(bl_bytes[i - N_PLAIN]);
		utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp,
							  (utf8proc_uint8_t *)b);
		b[k] = '\0';
		json_object_set_new(vocab, b, json_integer((json_int_t)i));
	}
	json_t *root = json_pack(
		"{s:[{s:i,s:s,s:b,s:b,s:b,s:b,s:b}],s:{s:s,s:o,s:[],s:b}}",
		"added_tokens", "id", 1, "content", "<s>", "special", 1,
		"normalized", 0, "lstrip", 0, "rstrip", 0, "single_word", 0,
		"model", "type", "BPE", "vocab", vocab, "merges", "byte_fallback",
		1);
	json_object_set_new(root, "decoder", obj(decoder));
	char *text = json_dumps(root, 0);
	json_decref(root);
	strata_tokenizer *t = NULL;
	strata_error err;
	if (strata_tokenizer_from_json(text, strlen(text), "synthetic", &t,
				       &err))
		fail_msg("synthetic %s: %s", decoder, err.message);
	free(text);
	return t;
}

static const char *const chains[] = {
	/* Llama-2 */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
	"{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":"
	"\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":"
	"\" \",\"start\":1,\"stop\":0}]}",
	/* trailing spaces stripped from the whole text */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
	"{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":"
	"\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":"
	"\" \",\"start\":2,\"stop\":2}]}",
	/* patterns that span tokens */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":"
	"\"Replace\",\"pattern\":{\"String\":\"ab\"},\"content\":\"X\"},{\"type\":"
	"\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\xe2\x96\x81\"},"
	"\"content\":\"_\"}]}",
	"{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
	"\"prepend_scheme\":\"first\",\"split\":true}",
	"{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
	"\"prepend_scheme\":\"never\",\"split\":true}",
	"{\"type\":\"ByteLevel\"}",
	/* byte-level bytes that complete a multi-byte Strip content */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteLevel\"},{\"type\":"
	"\"Strip\",\"content\":\"\xe2\x96\x81\",\"start\":1,\"stop\":2},"
	"{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},"
	"\"content\":\"_\"}]}",
	/* Metaspace on the joined text (its token 0) */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteLevel\"},{\"type\":"
	"\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":"
	"\"always\",\"split\":true}]}",
	/* the joined text as a byte token, ByteLevel after a join */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":"
	"\"ByteFallback\"}]}",
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":"
	"\"ByteLevel\"}]}",
	/* per-token steps only, HF's final join */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
	"{\"type\":\"Strip\",\"content\":\"a\",\"start\":1,\"stop\":1},{\"type\":"
	"\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":"
	"\"first\",\"split\":true}]}",
	/* a Strip content of more than one character (HF holds a char) */
	"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":"
	"\"Strip\",\"content\":\"ab\",\"start\":1,\"stop\":2}]}",
	"null",
};

static void test_every_decoder_chain_streams_as_it_decodes(void **state)
{
	(void)state;
	uint64_t x = 12345;
	int bad = 0;
	for (size_t c = 0; c < sizeof chains / sizeof *chains; c++) {
		strata_tokenizer *t = synthetic(chains[c]);
		for (int r = 0; r < 400; r++) {
			int32_t ids[12];
			size_t n = (size_t)(r % 12);
			for (size_t k = 0; k < n; k++) {
				x = x * 6364136223846793005ull +
				    1442695040888963407ull;
				ids[k] = (int32_t)((x >> 33) % N_PIECES);
			}
			int b = check_all_splits(t, chains[c], ids, n);
			bad += b;
			if (b > 3)
				break;
		}
		strata_tokenizer_destroy(t);
	}
	assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* What waits and what does not                                             */
/* ------------------------------------------------------------------------ */

static void test_only_what_later_tokens_change_waits(void **state)
{
	(void)state;
	strata_tokenizer *t = synthetic(chains[0]);
	strata_error err;
	strata_text_stream *s;
	int32_t prompt[] = {1, 2}; /* <s> a */
	assert_int_equal(strata_text_stream_create(t, prompt, 2, true, &s, &err),
			 0);
	push_expect(s, 7, " a");   /* ▁a: its space kept */
	push_expect(s, 10, "");	   /* <0xE2>: a run starts */
	push_expect(s, 11, "");
	push_expect(s, 12, "");	   /* "€" complete, but the run may go on */
	push_expect(s, 1, "");	   /* a skipped special changes nothing */
	push_expect(s, 3, "\xe2\x82\xac" "b"); /* the run ended valid */
	push_expect(s, 14, "");	   /* <0xC3> */
	push_expect(s, 13, "");	   /* <0xFF>: the run is now invalid */
	push_expect(s, 4, "\xef\xbf\xbd\xef\xbf\xbd "); /* one U+FFFD a token */
	finish_expect(s, "");
	finish_expect(s, "");
	const char *p;
	size_t n;
	assert_int_equal(strata_text_stream_push(s, 2, &p, &n, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(n, 0);
	strata_text_stream_destroy(s);
	strata_tokenizer_destroy(t);

	/* Trailing spaces the whole text would lose wait for what follows. */
	t = synthetic(chains[1]);
	assert_int_equal(strata_text_stream_create(t, NULL, 0, true, &s, &err),
			 0);
	push_expect(s, 4, "");	/* leading spaces: up to two go */
	push_expect(s, 4, "");
	push_expect(s, 4, "");	/* third: kept, unless it ends the text */
	push_expect(s, 2, " a");
	push_expect(s, 23, ""); /* "  " may end the text */
	push_expect(s, 3, "  b");
	push_expect(s, 4, "");
	finish_expect(s, "");
	strata_text_stream_destroy(s);
	strata_tokenizer_destroy(t);

	/* Byte-level bytes that may complete a Strip content wait too. */
	t = synthetic(chains[6]);
	int32_t e2 = (int32_t)N_PLAIN, x96 = e2 + 1, x81 = e2 + 2;
	assert_int_equal(strata_text_stream_create(t, NULL, 0, true, &s, &err),
			 0);
	push_expect(s, 2, "a");
	push_expect(s, e2, "");
	push_expect(s, x96, "");
	push_expect(s, x81, "");
	push_expect(s, 3, "_b");
	push_expect(s, e2, "");
	push_expect(s, x96, "");
	finish_expect(s, "\xef\xbf\xbd"); /* half a "▁" ends the text */
	strata_text_stream_destroy(s);
	assert_int_equal(strata_text_stream_create(t, NULL, 0, true, &s, &err),
			 0);
	push_expect(s, 2, "a");
	push_expect(s, e2, "");
	push_expect(s, x96, "");
	push_expect(s, x81, "");
	finish_expect(s, ""); /* a "▁" that ends the text is stripped */
	strata_text_stream_destroy(s);
	strata_tokenizer_destroy(t);

	/* A pattern's first bytes wait for the token that completes it. */
	t = synthetic(chains[2]);
	assert_int_equal(strata_text_stream_create(t, NULL, 0, true, &s, &err),
			 0);
	push_expect(s, 2, "");	/* "a" may start "ab" */
	push_expect(s, 3, "X"); /* a + b */
	push_expect(s, 2, "");
	push_expect(s, 2, "a");
	finish_expect(s, "a");
	strata_text_stream_destroy(s);
	strata_tokenizer_destroy(t);
}

/* The prompt's text is never printed again; where the first generated
 * bytes complete a character the prompt ended inside, that character
 * is printed whole. */
static void test_prompt_text_is_not_printed(void **state)
{
	(void)state;
	strata_tokenizer *t = synthetic(chains[0]);
	strata_error err;
	strata_text_stream *s;
	int32_t euro[] = {2, 10, 11, 12}; /* a € (as a byte run) */
	assert_int_equal(strata_text_stream_create(t, euro, 4, true, &s, &err),
			 0);
	push_expect(s, 10, "");
	push_expect(s, 11, "");
	push_expect(s, 12, "");
	push_expect(s, 5, "\xe2\x82\xac "); /* the prompt's "€" is not repeated */
	finish_expect(s, "");
	strata_text_stream_destroy(s);
	/* The prompt ends two bytes into "€": HF decodes it "a\xef\xbf\xbd
	 * \xef\xbf\xbd"; the third byte makes the character. */
	assert_int_equal(strata_text_stream_create(t, euro, 3, true, &s, &err),
			 0);
	push_expect(s, 12, "");
	finish_expect(s, "\xe2\x82\xac");
	strata_text_stream_destroy(s);
	strata_tokenizer_destroy(t);
}

/* Byte-level BPE: a generated token that would have merged with the
 * prompt's last characters is printed as generated (docs/infer.md). */
static void test_bytelevel_boundary_prints_the_tokens(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("tests/data/tokenizers/hf-gpt2");
	assert_non_null(t);
	strata_error err;
	int32_t *p, *w;
	size_t np, nw;
	assert_int_equal(strata_tokenizer_encode(t, "Hello wor", 9, false, &p,
						 &np, &err), 0);
	assert_int_equal(strata_tokenizer_encode(t, "Hello world", 11, false, &w,
						 &nw, &err), 0);
	assert_int_equal(np, nw); /* "Ġwor" + "ld" is not how "Ġworld" encodes */
	strata_text_stream *s;
	assert_int_equal(strata_text_stream_create(t, p, np, true, &s, &err), 0);
	push_expect(s, id_of(t, "ld"), "ld");
	finish_expect(s, "");
	strata_text_stream_destroy(s);
	/* A prompt ending in a space keeps it as its own token; a word token
	 * after it brings its own space. */
	strata_free(p);
	assert_int_equal(strata_tokenizer_encode(t, "Once upon a ", 12, false, &p,
						 &np, &err), 0);
	assert_int_equal(p[np - 1], id_of(t, "\xc4\xa0"));
	assert_int_equal(strata_text_stream_create(t, p, np, true, &s, &err), 0);
	push_expect(s, id_of(t, "\xc4\xa0time"), " time");
	strata_text_stream_destroy(s);
	strata_free(p);
	strata_free(w);
	strata_tokenizer_destroy(t);
}

/* ------------------------------------------------------------------------ */
/* Failure leaves the stream as it was                                      */
/* ------------------------------------------------------------------------ */

static void test_failed_calls_change_nothing(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("models/stories260K");
	assert_non_null(t);
	strata_error err;
	int32_t *ids;
	size_t n;
	static const char text[] = "Once upon a time \xf0\x9f\x98\x80 caf\xc3\xa9";
	assert_int_equal(strata_tokenizer_encode(t, text, sizeof text - 1, true,
						 &ids, &n, &err), 0);
	size_t k = 4, wn;
	strata_status st;
	bool bp;
	char *want = so_stream(t, ids, n, k, true, &wn, &st, &bp);
	assert_non_null(want);
	strata_text_stream *s = NULL;
	long f = 0;
	for (;; f++) {
		strata_alloc_fail_after(f);
		st = strata_text_stream_create(t, ids, k, true, &s, &err);
		strata_alloc_fail_after(-1);
		if (!st)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
	}
	char got[256];
	size_t len = 0;
	for (size_t i = k; i <= n; i++)
		for (f = 0;; f++) {
			const char *p;
			size_t m;
			strata_alloc_fail_after(f);
			st = i < n ? strata_text_stream_push(s, ids[i], &p, &m, &err)
				   : strata_text_stream_finish(s, &p, &m, &err);
			strata_alloc_fail_after(-1);
			if (!st) {
				memcpy(got + len, p, m);
				len += m;
				break;
			}
			assert_int_equal(st, STRATA_E_NOMEM);
			assert_int_equal(m, 0);
		}
	assert_int_equal(len, wn);
	assert_memory_equal(got, want, wn);
	strata_text_stream_destroy(s);
	free(want);
	strata_free(ids);
	strata_tokenizer_destroy(t);
}

static void test_bad_arguments_are_refused(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("tests/data/tokenizers/tiny/spm.json");
	strata_text_stream *s = NULL;
	strata_error err;
	assert_int_equal(strata_text_stream_create(NULL, NULL, 0, true, &s, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_text_stream_create(t, NULL, 3, true, &s, &err),
			 STRATA_E_INVALID_ARG);
	assert_null(s);
	strata_text_stream_destroy(NULL);
	strata_tokenizer_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_continuation_keeps_its_first_space),
		cmocka_unit_test(test_every_tokenizer_continues_as_it_decodes),
		cmocka_unit_test(test_random_ids_continue_as_they_decode),
		cmocka_unit_test(test_continuations_match_hugging_face),
		cmocka_unit_test(test_gguf_continuations_print_as_llama_cpp),
		cmocka_unit_test(test_every_decoder_chain_streams_as_it_decodes),
		cmocka_unit_test(test_only_what_later_tokens_change_waits),
		cmocka_unit_test(test_prompt_text_is_not_printed),
		cmocka_unit_test(test_bytelevel_boundary_prints_the_tokens),
		cmocka_unit_test(test_failed_calls_change_nothing),
		cmocka_unit_test(test_bad_arguments_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
