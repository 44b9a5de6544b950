/* status.h - every strata status code, one X-macro list (layer: base).
 *
 * Codes are grouped by layer in blocks of 100 with gaps, and are never
 * renumbered: scripts may match on them. Add new codes at the end of their
 * layer's block. Each entry is X(NAME, VALUE, "what it means").
 */
#ifndef STRATA_STATUS_H
#define STRATA_STATUS_H

#define STRATA_STATUS_MAP(X)                                                   \
	X(OK, 0, "success")                                                    \
	/* base: 100-199 */                                                    \
	X(E_NOMEM, 100, "out of host memory")                                  \
	X(E_OVERFLOW, 101, "a size computation overflowed")                    \
	X(E_INVALID_ARG, 102, "invalid argument")                              \
	X(E_SIZE_SYNTAX, 103, "not a size")                                    \
	X(E_IO, 104, "input/output error")                                     \
	X(E_NOT_FOUND, 105, "not found")                                       \
	X(E_USAGE, 106, "command-line usage error")                            \
	X(E_PARSE, 107, "malformed input")                                     \
	X(E_UNSUPPORTED, 108, "not supported")                                 \
	X(E_BUSY, 109, "object still in use")                                  \
	X(E_THREAD, 110, "thread error")                                       \
	X(E_INTERNAL, 111, "internal invariant broken")                        \
	/* shard: 200-299 */                                                   \
	X(E_SHARD_ZERO_DEVICES, 200, "no devices to shard onto")               \
	X(E_SHARD_DEVICE_RANGE, 201, "device index out of range")              \
	X(E_SHARD_LOAD_OVERFLOW, 202, "device load overflowed")                \
	X(E_SHARD_INPUT, 203, "malformed shard input line")                    \
	X(E_SHARD_RELEASE, 204, "released more load than a device holds")     \
	/* checkpoint: 300-399 */                                              \
	X(E_CKPT_FORMAT, 300, "not a checkpoint strata can read")              \
	X(E_CKPT_TRUNCATED, 301, "checkpoint file truncated")                  \
	X(E_CKPT_HEADER, 302, "malformed checkpoint header")                   \
	X(E_CKPT_DTYPE, 303, "unknown or unsupported tensor type")             \
	X(E_CKPT_SHAPE, 304, "tensor shape does not match its bytes")          \
	X(E_CKPT_RANGE, 305, "tensor byte range invalid")                      \
	X(E_CKPT_DUPLICATE, 306, "duplicate tensor name")                      \
	X(E_CKPT_INDEX, 307, "malformed shard index")                          \
	X(E_CKPT_VERSION, 308, "unsupported format version")                   \
	X(E_CKPT_ALIGNMENT, 309, "bad alignment")                              \
	X(E_CKPT_LIMIT, 310, "a count or length exceeds its limit")            \
	X(E_CKPT_NAME, 311, "invalid tensor or key name")                      \
	X(E_CKPT_METADATA, 312, "malformed metadata")                          \
	X(E_CKPT_READ, 313, "payload read failed")                             \
	X(E_CKPT_VALUE, 314, "tensor holds NaN or infinite values")            \
	/* model: 400-499 */                                                   \
	X(E_MODEL_CONFIG, 400, "malformed model configuration")                \
	X(E_MODEL_ARCH, 401, "unsupported architecture")                       \
	X(E_MODEL_TENSOR_MISSING, 402, "expected tensor missing")              \
	X(E_MODEL_TENSOR_SHAPE, 403, "tensor has the wrong shape")             \
	X(E_MODEL_TENSOR_EXTRA, 404, "unexplained tensor in checkpoint")       \
	/* plan: 500-599 */                                                    \
	X(E_PLAN_NOTHING_FITS, 500, "no residency mode fits the budgets")      \
	X(E_PLAN_OPTIONS, 501, "invalid combination of plan options")          \
	X(E_PLAN_UNKNOWN_ARCH, 502, "architecture unknown for this plan")      \
	/* residency: 600-699 */                                               \
	X(E_RES_BUDGET, 600, "tier budget exceeded")                           \
	X(E_RES_STATE, 601, "unit acquired or released out of order")          \
	X(E_RES_READER, 602, "background reader failed")                       \
	/* backend: 700-799 */                                                 \
	X(E_BACKEND_UNAVAILABLE, 700, "backend not available")                 \
	X(E_DEVICE_OOM, 701, "out of device memory")                           \
	X(E_DEVICE, 702, "device error")                                       \
	/* infer: 800-899 */                                                   \
	X(E_INFER_CONTEXT, 800, "context length exceeded")                     \
	X(E_INFER_TOKEN, 801, "token id out of range")                         \
	X(E_INFER_BATCH_INPUT, 802, "malformed batch request")                 \
	X(E_INFER_REPLICA, 803, "a replica failed")                            \
	X(E_INFER_NONFINITE, 804, "non-finite logits")                         \
	X(E_INFER_STOP, 805, "generation stopped by its caller")               \
	/* text: 900-999 */                                                    \
	X(E_TEXT_TOKENIZER, 900, "malformed tokenizer")                        \
	X(E_TEXT_UNSUPPORTED, 901, "unsupported tokenizer component")          \
	X(E_TEXT_ENCODING, 902, "text is not valid for this tokenizer")       \
	X(E_TEXT_TEMPLATE, 903, "malformed chat template")                     \
	X(E_TEXT_TEMPLATE_RENDER, 904, "chat template failed while rendering") \
	X(E_TEXT_TEMPLATE_RAISED, 905, "the chat template refused the input")  \
	X(E_TEXT_TEMPLATE_LIMIT, 906, "chat template passed a sandbox limit")

typedef enum strata_status {
#define STRATA_STATUS_ENUM(name, value, text) STRATA_##name = value,
	STRATA_STATUS_MAP(STRATA_STATUS_ENUM)
#undef STRATA_STATUS_ENUM
} strata_status;

#endif
