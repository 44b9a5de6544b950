/* tokenizer_build.h - the builder the loaders fill a tokenizer through
 * (tokenizer_build.c); the encoder and the decoder never need it
 * (layer: text). Not a public API: names are strata__ and may change. */
#ifndef STRATA_TEXT_TOKENIZER_BUILD_H
#define STRATA_TEXT_TOKENIZER_BUILD_H

#include "text/internal.h"

/* Builds an empty tokenizer with every field at its sentinel. */
strata_tokenizer *strata__tokenizer_new(strata_error *err);
/* Sizes the id tables for n ids (all holes). */
strata_status strata__tokenizer_alloc_ids(strata_tokenizer *t, uint32_t n,
					  strata_error *err);
/* Sets id's piece (copied). in_model: the piece belongs to the model's
 * vocabulary (merges can reach it), else it is only an added token. */
strata_status strata__tokenizer_set_piece(strata_tokenizer *t, int32_t id,
					  const char *p, size_t n,
					  bool in_model, strata_error *err);
/* After every piece is set: the model maps, byte tokens, byte-level
 * mapping. */
strata_status strata__tokenizer_finish_vocab(strata_tokenizer *t,
					     strata_error *err);
/* Adds merge "left right" (pieces) with rank. */
strata_status strata__tokenizer_add_merge(strata_tokenizer *t,
					  const char *l, size_t ln,
					  const char *r, size_t rn,
					  int32_t rank, const char *what,
					  strata_error *err);
/* Appends an added token (content copied). */
strata_status strata__tokenizer_add_added(strata_tokenizer *t,
					  const text_added *a,
					  strata_error *err);
/* After normalizers are known: normalizes `normalized` added contents and
 * sorts the added tokens for matching. */
strata_status strata__tokenizer_finish_added(strata_tokenizer *t,
					     strata_error *err);

#endif /* STRATA_TEXT_TOKENIZER_BUILD_H */
