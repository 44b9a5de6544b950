/* text.h - tokenizers: Hugging Face tokenizer.json (BPE, byte-level and
 * SentencePiece-style) and GGUF vocabularies (llama / gpt2), encoding,
 * decoding and streaming decoding of continuations; chat templates and
 * chat prompts from OpenAI messages; stop strings (layer: text).
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

/* ------------------------------------------------------------------------ */
/* Chat templates                                                           */
/* ------------------------------------------------------------------------ */

/* A chat template: the Jinja subset that models' chat_template strings use,
 * rendered the way Hugging Face transformers' apply_chat_template renders
 * (Jinja2's sandbox with trim_blocks, lstrip_blocks, loop controls, a
 * raise_exception global, strftime_now and a tojson that keeps non-ASCII).
 * docs/templates.md says what is supported and where it differs.
 *
 * Trust: the template and the messages are hostile. A template cannot
 * reach files, the environment or the network; its time (steps), output
 * and memory are bounded; a bad one is an error with line and column,
 * never a crash. Immutable after creation: renders may run concurrently. */
typedef struct strata_chat_template strata_chat_template;

#define STRATA_TEMPLATE_MAX_SOURCE_BYTES ((size_t)4 << 20)

typedef struct strata_chat_template_options {
	bool add_generation_prompt;
	const char *bos_token;	/* NUL-terminated; NULL: undefined */
	const char *eos_token;	/* likewise */
	const char *tools_json; /* a JSON array, or NULL: `tools` is none */
	/* A JSON object whose members become variables (enable_thinking,
	 * date_string, documents ...), overriding the ones above; or NULL. */
	const char *extra_json;
	/* strftime_now's clock: now_unix as UTC when fixed_time, else the
	 * wall clock in local time, as Python's datetime.now(). */
	bool fixed_time;
	int64_t now_unix;
	uint64_t max_steps;	   /* 0: 10 million */
	uint64_t max_output_bytes; /* 0: 16 MiB */
	uint64_t max_memory_bytes; /* 0: 256 MiB */
} strata_chat_template_options;

/* Zeroes o: no generation prompt, no tokens, no tools, wall clock, the
 * default limits. */
void strata_chat_template_options_init(strata_chat_template_options *o);

/* Parses len bytes of template source (UTF-8, at most
 * STRATA_TEMPLATE_MAX_SOURCE_BYTES). On success the caller owns *out
 * (strata_chat_template_destroy); on failure *out is untouched.
 * Errors: E_TEXT_TEMPLATE with "chat template line L, column C: ...",
 * E_NOMEM. */
strata_status strata_chat_template_create(const char *source, size_t len,
					  strata_chat_template **out,
					  strata_error *err);

/* Renders the conversation messages_json (a JSON array of message objects,
 * len bytes) with options o (NULL: defaults). On success *out (NUL-
 * terminated, strata_alloc'd, caller frees with strata_free) holds *out_len
 * bytes; on failure both are untouched. Errors: E_INVALID_ARG (messages,
 * tools or extra not the JSON they must be), E_TEXT_TEMPLATE_RAISED (the
 * template's own raise_exception: the message is exactly its text),
 * E_TEXT_TEMPLATE_RENDER (a type error, an undefined value used ...),
 * E_TEXT_TEMPLATE_LIMIT (steps, output or memory), E_NOMEM. */
strata_status strata_chat_template_render(const strata_chat_template *t,
					  const char *messages_json, size_t len,
					  const strata_chat_template_options *o,
					  char **out, size_t *out_len,
					  strata_error *err);

void strata_chat_template_destroy(strata_chat_template *t); /* NULL is fine */

/* A model's own chat template and special tokens: MODEL is a directory
 * with tokenizer_config.json (`chat_template` as a string, or a list of
 * {name, template} where "default" is taken; bos_token / eos_token as
 * strings or {"content": ...}) or a .gguf file (tokenizer.chat_template,
 * the pieces of tokenizer.ggml.bos/eos_token_id). On success *source
 * (NUL-terminated, *len bytes), *bos and *eos (NULL where the model has
 * none) are strata_alloc'd and the caller frees them. Errors: E_NOT_FOUND
 * (no template: the fix says to pass one), E_IO, E_PARSE, E_NOMEM. */
strata_status strata_chat_template_load(const char *model_path, char **source,
					size_t *len, char **bos, char **eos,
					strata_error *err);

/* ------------------------------------------------------------------------ */
/* Chat prompts: an OpenAI `messages` array through the model's template     */
/* ------------------------------------------------------------------------ */

struct json_t; /* jansson's; callers that pass messages include <jansson.h> */

/* A model's chat format: its chat template and the bos_token / eos_token
 * texts the template is given. Immutable after creation: renders may run
 * concurrently. */
typedef struct strata_chat_format strata_chat_format;

#define STRATA_CHAT_MAX_MESSAGES 65536u

/* Builds a format from template source (len bytes) and the token texts
 * (NUL-terminated; NULL: the template sees them undefined). All three are
 * copied. Errors as strata_chat_template_create, E_NOMEM. The caller owns
 * *out (strata_chat_format_destroy); on failure *out is untouched. */
strata_status strata_chat_format_create(const char *source, size_t len,
					const char *bos, const char *eos,
					strata_chat_format **out,
					strata_error *err);

/* The model's format: the template is template_file when not NULL
 * (`--chat-template FILE`, read whole), else the model's own
 * (strata_chat_template_load: tokenizer_config.json's chat_template or
 * GGUF tokenizer.chat_template). The tokens are the model's (its
 * tokenizer_config.json bos_token / eos_token, or the GGUF's), and where
 * the model names none, the pieces of tok's special ids (tok may be
 * NULL). Errors: E_NOT_FOUND for a model without a template (the fix says
 * to pass --chat-template FILE) or a missing file, E_IO, E_PARSE,
 * E_TEXT_TEMPLATE (the template does not parse), E_NOMEM. */
strata_status strata_chat_format_load(const char *model_path,
				      const char *template_file,
				      const strata_tokenizer *tok,
				      strata_chat_format **out,
				      strata_error *err);

void strata_chat_format_destroy(strata_chat_format *f); /* NULL is fine */

/* The token texts the template is given; NULL where there is none. The
 * eos text is what ends an assistant's turn in most templates
 * (<|im_end|>, <|eot_id|>, </s>): generation stops at its id. */
const char *strata_chat_format_bos(const strata_chat_format *f);
const char *strata_chat_format_eos(const strata_chat_format *f);

/* Checks an OpenAI Chat Completions `messages` array: 1 to
 * STRATA_CHAT_MAX_MESSAGES objects, each with "role" one of system, user,
 * assistant, tool, and "content" a string, an array of {"type": "text",
 * "text": STRING} parts, or (an assistant's with "tool_calls", or a tool's)
 * null or absent; "name" and "tool_call_id", when present, strings. Other
 * members (tool_calls ...) go to the template unchanged. E_INVALID_ARG
 * naming the message (1-based) and what is wrong, with the fix. */
strata_status strata_chat_messages_check(const struct json_t *messages,
					 strata_error *err);

/* Renders messages (checked as above; borrowed, unchanged) through f: a
 * content array of text parts becomes one string, the parts' texts joined
 * by "\n" (as vLLM does), so every template sees string contents.
 * add_generation_prompt ends with the opening of the assistant's turn
 * (what generation continues). On success *out (NUL-terminated,
 * strata_alloc'd, the caller frees) holds *out_len bytes; on failure both
 * are untouched. Errors: E_INVALID_ARG (the messages), the template's
 * errors (E_TEXT_TEMPLATE_RAISED with its own message ...), E_NOMEM. */
strata_status strata_chat_format_render(const strata_chat_format *f,
					const struct json_t *messages,
					bool add_generation_prompt,
					char **out, size_t *out_len,
					strata_error *err);

/* Renders as above and encodes the text with tok, special tokens written
 * in it recognised and nothing added (the template writes its own BOS, as
 * transformers' apply_chat_template(tokenize=True) does). *ids
 * (strata_alloc'd, the caller frees) holds *count >= 1 ids; a rendering
 * that encodes to nothing is E_TEXT_TEMPLATE_RENDER. Errors as render and
 * strata_tokenizer_encode. */
strata_status strata_chat_format_encode(const strata_chat_format *f,
					const strata_tokenizer *tok,
					const struct json_t *messages,
					bool add_generation_prompt,
					int32_t **ids, size_t *count,
					strata_error *err);

/* ------------------------------------------------------------------------ */
/* Stop strings                                                             */
/* ------------------------------------------------------------------------ */

/* Generated text ends at the first of a few stop strings (OpenAI `stop`,
 * `--stop`), the stop string itself not given out. Fed the text as it is
 * decoded (strata_text_stream's pieces), the matcher gives out what is
 * settled and holds back what could still be the start of a stop string
 * (and an unfinished UTF-8 character), so a stop split over tokens is
 * found and never partly printed. The stop string that ends first in the
 * text wins (the longest of those ending at the same byte); the output
 * does not depend on how the text was split into pieces.
 * Not thread-safe: one matcher per sequence. */
typedef struct strata_stop_matcher strata_stop_matcher;

#define STRATA_STOP_MAX_COUNT 32u
#define STRATA_STOP_MAX_BYTES 1024u

/* Copies count stop strings (lens[i] bytes each, or NUL-terminated when
 * lens is NULL); count 0 gives a matcher that only holds back unfinished
 * characters. Errors: E_INVALID_ARG for more than STRATA_STOP_MAX_COUNT
 * strings, an empty one, one longer than STRATA_STOP_MAX_BYTES or not
 * valid UTF-8 (each naming the string, 1-based), E_NOMEM. The caller owns
 * *out (strata_stop_matcher_destroy); on failure *out is untouched. */
strata_status strata_stop_matcher_create(const char *const *stops,
					 const size_t *lens, size_t count,
					 strata_stop_matcher **out,
					 strata_error *err);
void strata_stop_matcher_destroy(strata_stop_matcher *m); /* NULL is fine */

/* Forgets the held text and any match: a new text starts. */
void strata_stop_matcher_reset(strata_stop_matcher *m);

/* Adds len bytes of text. *text / *len (owned by m, valid until its next
 * call, NUL-terminated) are the text now settled; *matched is the index
 * of the stop string that matched, the text being everything before it
 * (the matcher has then stopped: further pushes are E_INVALID_ARG until a
 * reset), or -1. On failure *len is 0 and m is as before the call.
 * Errors: E_INVALID_ARG, E_NOMEM. */
strata_status strata_stop_matcher_push(strata_stop_matcher *m,
				       const char *piece, size_t len,
				       const char **text, size_t *text_len,
				       int *matched, strata_error *err);

/* The text ended without a match: what was held comes out. Output and
 * errors as push; after a match it gives nothing. */
strata_status strata_stop_matcher_finish(strata_stop_matcher *m,
					 const char **text, size_t *len,
					 strata_error *err);

/* Bytes held back now (0 for NULL). */
size_t strata_stop_matcher_held(const strata_stop_matcher *m);

#endif
