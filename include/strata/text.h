/* text.h - tokenizers: Hugging Face tokenizer.json (BPE, byte-level and
 * SentencePiece-style) and GGUF vocabularies (llama / gpt2), encoding,
 * decoding and streaming detokenization (layer: text).
 *
 * Trust: tokenizer.json and GGUF metadata are hostile input. Every count,
 * id and string is checked; a component strata does not implement is
 * E_TEXT_UNSUPPORTED naming it, never a silently different tokenization.
 *
 * Text given to the encoder may be any bytes. Invalid UTF-8 is handled the
 * way Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy
 * handle it: each maximal invalid subpart becomes U+FFFD, then the text is
 * tokenized. The test data records this (tools/make_tokenizer_testdata.py).
 */
#ifndef STRATA_TEXT_H
#define STRATA_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/base.h"

struct strata_gguf;

/* One tokenizer, immutable after creation: encode and decode are
 * thread-safe on a shared object. */
typedef struct strata_tokenizer strata_tokenizer;

/* Special ids; -1 where the tokenizer has none. */
typedef struct strata_tokenizer_specials {
	int32_t bos, eos, unk, pad;
	bool add_bos; /* encode with add_special puts BOS first */
	bool add_eos; /* encode with add_special puts EOS last */
} strata_tokenizer_specials;

/* Caps on hostile files, so a tiny file cannot ask for huge tables. */
#define STRATA_TEXT_MAX_VOCAB (1u << 22)
#define STRATA_TEXT_MAX_TOKEN_BYTES (1u << 16)
#define STRATA_TEXT_MAX_JSON_BYTES ((uint64_t)512 << 20)

/* Builds a tokenizer from the text of a tokenizer.json (len bytes, need not
 * be NUL-terminated). `what` names the source in messages. On success the
 * caller owns *out (strata_tokenizer_destroy); on failure *out is untouched.
 * Errors: E_TEXT_TOKENIZER (malformed), E_TEXT_UNSUPPORTED (names the
 * component), E_NOMEM. */
strata_status strata_tokenizer_from_json(const char *json, size_t len,
					 const char *what,
					 strata_tokenizer **out,
					 strata_error *err);

/* Builds a tokenizer from a GGUF file's tokenizer.ggml.* metadata
 * (tokenizer.ggml.model "llama" or "gpt2"; others, such as "bert" WPM or
 * "t5" UGM, are E_TEXT_UNSUPPORTED). Control and user-defined tokens are
 * recognised in text, as llama.cpp does with parse_special; "gpt2" takes
 * its split regexes from tokenizer.ggml.pre (an unknown name is
 * E_TEXT_UNSUPPORTED). The GGUF is only read during the call. Ownership
 * and errors as for strata_tokenizer_from_json. */
strata_status strata_tokenizer_from_gguf(const struct strata_gguf *g,
					 const char *what,
					 strata_tokenizer **out,
					 strata_error *err);

/* Opens MODEL as everywhere: a directory holding tokenizer.json, or a
 * .gguf file (vocabulary-only ones included). */
strata_status strata_tokenizer_load(const char *model_path,
				    strata_tokenizer **out, strata_error *err);

void strata_tokenizer_destroy(strata_tokenizer *t); /* NULL is fine */

/* Encodes len bytes of text. With add_special the tokenizer's own rule
 * adds BOS/EOS (TemplateProcessing, or GGUF add_bos/add_eos). Special
 * tokens written in the text are always recognised, as HF does. On success
 * *ids (strata_alloc'd, caller frees with strata_free) holds *count ids;
 * on failure *ids and *count are untouched. */
strata_status strata_tokenizer_encode(const strata_tokenizer *t,
				      const char *text, size_t len,
				      bool add_special, int32_t **ids,
				      size_t *count, strata_error *err);

/* Decodes ids to UTF-8 through the tokenizer's decoder (byte-level,
 * Metaspace, Replace/ByteFallback/Fuse/Strip). skip_special drops special
 * tokens. Bytes that do not form valid UTF-8 become U+FFFD, as HF does.
 * *text is NUL-terminated, caller frees with strata_free. An id outside the
 * vocabulary is E_INVALID_ARG. */
strata_status strata_tokenizer_decode(const strata_tokenizer *t,
				      const int32_t *ids, size_t count,
				      bool skip_special, char **text,
				      size_t *len, strata_error *err);

/* Number of ids (vocabulary plus added tokens), ids are 0..count-1. */
uint32_t strata_tokenizer_vocab_count(const strata_tokenizer *t);

/* The raw piece of id as stored in the vocabulary ("Ġthe", "▁the",
 * "<0x0A>"), not NUL-terminated; NULL for an id out of range or a hole. */
const char *strata_tokenizer_piece(const strata_tokenizer *t, int32_t id,
				   size_t *len);

/* Whether id is a special (control) token. */
bool strata_tokenizer_is_special(const strata_tokenizer *t, int32_t id);

/* Id of an exact piece, or -1. */
int32_t strata_tokenizer_find(const strata_tokenizer *t, const char *piece,
			      size_t len);

void strata_tokenizer_get_specials(const strata_tokenizer *t,
				   strata_tokenizer_specials *out);

/* ------------------------------------------------------------------------ */
/* Streaming detokenizer                                                    */
/* ------------------------------------------------------------------------ */

/* Turns ids into text one at a time for display during generation. It never
 * emits part of a UTF-8 character: bytes of an incomplete character wait
 * for the next token; a sequence that can no longer become valid is emitted
 * as U+FFFD. The concatenation of every push and the final flush equals
 * strata_tokenizer_decode of the same ids except where the tokenizer's
 * decoder treats invalid byte runs differently. Holds a borrowed pointer to
 * t, which must outlive it. */
typedef struct strata_detokenizer strata_detokenizer;

strata_status strata_detokenizer_create(const strata_tokenizer *t,
					bool skip_special,
					strata_detokenizer **out,
					strata_error *err);
void strata_detokenizer_destroy(strata_detokenizer *d);

/* Adds one id; *text and *len (owned by d, valid until the next call) are the
 * complete characters now ready, possibly none. */
strata_status strata_detokenizer_push(strata_detokenizer *d, int32_t id,
				      const char **text, size_t *len,
				      strata_error *err);
/* Ends the stream: whatever bytes are still held come out (as U+FFFD when
 * they are an incomplete character). */
strata_status strata_detokenizer_flush(strata_detokenizer *d,
				       const char **text, size_t *len,
				       strata_error *err);

#endif
