/* text.h - tokenizers: Hugging Face tokenizer.json (BPE, byte-level and
 * SentencePiece-style) and GGUF vocabularies (llama / gpt2), encoding,
 * decoding and streaming decoding of continuations (layer: text).
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
/* Streaming decoder                                                        */
/* ------------------------------------------------------------------------ */

/* The text that ids generated after a prompt add to the prompt's text,
 * token by token: what run, batch and the server print. Over a stream the
 * pushes and the finish together give exactly
 *     decode(prompt + generated) with decode(prompt) removed,
 * decode being strata_tokenizer_decode with the same skip_special, so a
 * continuation keeps the space its first token starts with (SentencePiece
 * decoders strip one leading space at the start of a text, not of a
 * continuation). A push returns the text that no later token can change;
 * it holds back only what still depends on the tokens after it: an
 * incomplete UTF-8 character, a run of <0xNN> byte tokens until the run
 * ends (HF gives a run that is not valid UTF-8 as one U+FFFD per token),
 * the start of a decoder's Replace pattern, trailing characters a Strip
 * step may remove at the end of the text.
 *
 * Where the generated tokens change the end of the prompt's own text (a
 * prompt ending in half a character or in a byte run that the next byte
 * tokens complete or spoil), decode(prompt) is not a prefix of the whole:
 * the stream then gives the whole text from the first character that
 * differs from the prompt's text (so the completed character appears).
 *
 * Not thread-safe; one stream per sequence. Holds a borrowed pointer to t,
 * which must outlive it. */
typedef struct strata_text_stream strata_text_stream;

/* Creates a stream continuing prompt (n_prompt ids, NULL when 0; with no
 * prompt the text is the whole decode of what is pushed). The prompt is
 * decoded once here, O(n_prompt); each push then costs O(its token).
 * skip_special drops special tokens as strata_tokenizer_decode does. On
 * success the caller owns *out (strata_text_stream_destroy); on failure
 * *out is untouched. Errors: E_INVALID_ARG (missing argument, a prompt id
 * outside the vocabulary), E_NOMEM. */
strata_status strata_text_stream_create(const strata_tokenizer *t,
					const int32_t *prompt, size_t n_prompt,
					bool skip_special,
					strata_text_stream **out,
					strata_error *err);
void strata_text_stream_destroy(strata_text_stream *s); /* NULL is fine */

/* Adds one generated id. *text and *len (owned by s, valid until its next
 * call, NUL-terminated, complete UTF-8 characters) are the text now
 * settled, possibly none. On failure *len is 0 and the stream is as
 * before the call (the push may be retried). Errors: E_INVALID_ARG (id
 * outside the vocabulary, stream finished), E_NOMEM. */
strata_status strata_text_stream_push(strata_text_stream *s, int32_t id,
				      const char **text, size_t *len,
				      strata_error *err);

/* Ends the stream: what was held back comes out as the whole decode gives
 * it (an unfinished character as U+FFFD). Later pushes are E_INVALID_ARG;
 * a second finish gives no text. Output and failure as for push. */
strata_status strata_text_stream_finish(strata_text_stream *s,
					const char **text, size_t *len,
					strata_error *err);

#endif
