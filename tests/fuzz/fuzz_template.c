/* fuzz_template.c - libFuzzer target for the chat-template interpreter:
 * any bytes are a template that parses or is refused, and one that parses
 * renders a small conversation (with tools and extra variables) or fails
 * with a template status, under small limits: never a crash, leak, hang or
 * undefined behaviour, and a rendering never passes its output limit
 * (layer: text). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata/text.h"

static const char messages[] =
	"[{\"role\": \"system\", \"content\": \"Be brief.\"},"
	" {\"role\": \"user\", \"content\": \"Hi \\u00e9 \\u6771\"},"
	" {\"role\": \"assistant\", \"content\": \"<think>x</think>ok\","
	"  \"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\","
	"   \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1.5}}}]},"
	" {\"role\": \"tool\", \"content\": \"42\", \"tool_call_id\": \"abcdefghi\"},"
	" {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}]}]";

static const char tools[] =
	"[{\"type\": \"function\", \"function\": {\"name\": \"f\","
	" \"parameters\": {\"type\": \"object\"}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_chat_template *t = NULL;
	strata_error err;
	if (strata_chat_template_create((const char *)data, size, &t, &err)) {
		if (err.code != STRATA_E_TEXT_TEMPLATE && err.code != STRATA_E_NOMEM)
			abort();
		return 0;
	}
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	o.add_generation_prompt = size & 1;
	o.bos_token = "<s>";
	o.eos_token = "</s>";
	o.tools_json = size & 2 ? tools : NULL;
	o.extra_json = "{\"enable_thinking\": false, \"n\": 3}";
	o.fixed_time = true;
	o.now_unix = 1785024000;
	o.max_steps = 200000;
	o.max_output_bytes = 1 << 16;
	o.max_memory_bytes = 32 << 20;
	char *out = NULL;
	size_t len = 0;
	strata_status st = strata_chat_template_render(t, messages,
						       sizeof messages - 1, &o,
						       &out, &len, &err);
	if (!st && (len > o.max_output_bytes || strlen(out) > len))
		abort();
	if (st && st != STRATA_E_TEXT_TEMPLATE_RENDER &&
	    st != STRATA_E_TEXT_TEMPLATE_RAISED &&
	    st != STRATA_E_TEXT_TEMPLATE_LIMIT && st != STRATA_E_NOMEM)
		abort();
	strata_free(out);
	strata_chat_template_destroy(t);
	return 0;
}
