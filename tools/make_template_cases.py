#!/usr/bin/env python3
"""make_template_cases.py - renders small Jinja snippets the way Hugging Face
transformers renders chat templates (Jinja2's ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks, the loopcontrols extension, raise_exception,
strftime_now fixed to 2026-07-26 and transformers' tojson) and writes
tests/data/chat-templates/snippets.json, the reference that
tests/text/test_template_snippets.c holds strata's interpreter to.

Each case: name, template, vars (a JSON object of variables) and either
"expected" (the exact text) or "error" (the Jinja2 exception's class: the
interpreter must refuse the case too, with a status of its own).

    python3 tools/make_template_cases.py > tests/data/chat-templates/snippets.json
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2026, 7, 26, 0, 0, 0)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = strftime_now
    return e


MSGS = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi \u00e9 \u6771"},
        {"role": "assistant", "content": "Hello.", "tool_calls": None},
        {"role": "user", "content": "  spaces  "}]

CASES = [
    # whitespace control
    ("trim_blocks", "a\n{% if true %}\nb\n{% endif %}\nc\n", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip_not_after_text", "a  {% if true %}x{% endif %}  b", {}),
    ("lstrip_tab", "a\n\t\t{% if true %}x{% endif %}\n", {}),
    ("minus_both", "a   \n  {%- if true -%}  \n  b  {%- endif -%}\n\n c", {}),
    ("plus_keeps", "a\n    {%+ if true %}x{% endif +%}\nb", {}),
    ("var_no_trim", "a\n{{ 'x' }}\nb\n  {{ 'y' }}\n", {}),
    ("var_minus", "a \n {{- 'x' -}} \n b", {}),
    ("comment_trim", "a\n{# c #}\nb\n  {#- d -#}  \n  c", {}),
    ("comment_lstrip", "x\n    {# note #}\ny", {}),
    ("raw", "{% raw %}{{ not }} {% evaluated %}{% endraw %}!", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("trailing_newline", "text\n", {}),
    ("two_trailing", "text\n\n", {}),
    ("block_after_block", "{% if true %}{% if true %}\n  x\n{% endif %}{% endif %}", {}),
    ("set_line", "  {% set x = 1 %}\n{{ x }}", {}),
    ("for_lines", "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}", {"messages": MSGS}),
    # literals and operators
    ("arith", "{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }}", {}),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 3.0 }} {{ 1 / 3 }} {{ 2.5 * 2 }} {{ 1e16 }} {{ 123456789012345.6 }}", {}),
    ("float_div", "{{ 10 / 4 }} {{ 9 / 3 }} {{ 7.0 // 2 }} {{ -7.5 % 2 }}", {}),
    ("unary", "{{ -3 }} {{ +3 }} {{ - 2 ** 2 }} {{ not true }} {{ not 0 }}", {}),
    ("strings", "{{ 'a' ~ 1 ~ none ~ true }} {{ \"dq\" + 'sq' }} {{ 'a' 'b' }} {{ 'x' * 3 }}", {}),
    ("escapes", "{{ 'tab\\there\\nnl \\\\ \\' \\x41 \\u00e9 \\101' }}", {}),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }}", {}),
    ("in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ '' in 'x' }}", {}),
    ("and_or", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or none }} {{ [] or {} }}", {}),
    ("condexpr", "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} {{ 'a' if false }}|", {}),
    ("repr", "{{ [1, 'a', none, true, 1.5, {'k': [2]}] }} {{ ('x',) }} {{ (1, 2) }} {{ \"it's\" }} {{ ['it\\'s', 'q\"'] }}", {}),
    ("repr_unicode", "{{ ['\u00e9', '\\n', '\\t'] }}", {}),
    ("dict_literal", "{% set d = {'a': 1, 'b': [1, 2]} %}{{ d.a }} {{ d['b'][1] }} {{ d }}", {}),
    ("slices", "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][:-1] }} {{ [1,2,3,4][::2] }} {{ 'h\u00e9llo'[1] }} {{ 'abc'[-1] }} {{ [1,2,3][5:] }}", {}),
    ("subscript_attr", "{{ messages[0].role }} {{ messages[1]['content'] }} {{ messages[-1].content }}", {"messages": MSGS}),
    ("print_none", "{{ none }} {{ true }} {{ false }} {{ x }}|{{ messages[2].tool_calls }}", {"messages": MSGS}),
    # statements
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ x }};{% endfor %}", {}),
    ("for_else", "{% for x in [] %}a{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}:{{ m.content }} {% endfor %}", {"messages": MSGS}),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}", {}),
    ("for_dict", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("for_scope", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("namespace_empty", "{% set ns = namespace() %}{% set ns.x = 5 %}{{ ns.x }}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.depth }}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}", {}),
    ("cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("elif", "{% for i in range(4) %}{% if i == 0 %}z{% elif i == 1 %}o{% elif i == 2 %}t{% else %}e{% endif %}{% endfor %}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", {}),
    ("set_block", "{% set x %}  inner {{ 1 + 1 }}  {% endset %}[{{ x }}]", {}),
    ("set_block_filter", "{% set x | upper | trim %}  abc  {% endset %}[{{ x }}]", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}", {}),
    ("macro_scope", "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", {}),
    ("call_block", "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}body{% endcall %}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("messages_loop", "{% for m in messages %}<{{ m['role'] }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}", {"messages": MSGS}),
    ("generation_prompt", "{% if add_generation_prompt %}<assistant>{% endif %}", {"add_generation_prompt": True}),
    # filters
    ("trim", "[{{ '  x \\n' | trim }}] [{{ 'xxaxx' | trim('x') }}] [{{ undefined_var | trim }}]", {}),
    ("length", "{{ 'h\u00e9' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }} {{ messages | length }}", {"messages": MSGS}),
    ("case", "{{ 'hello World' | upper }} {{ 'ABC' | lower }} {{ 'hello wORLD' | capitalize }} {{ 'hello wORLD-x (y)' | title }}", {}),
    ("tojson", "{{ messages | tojson }}", {"messages": MSGS}),
    ("tojson_indent", "{{ {'a': [1, 2, {'b': none}], 'c': {}, 'd': []} | tojson(indent=4) }}", {}),
    ("tojson_opts", "{{ {'b': 1, 'a': 2.0} | tojson(sort_keys=true) }} {{ [1, 'x'] | tojson(separators=(',', ':')) }} {{ 'a\"b\\\\c\\n\\u0001\u00e9' | tojson }}", {}),
    ("tojson_scalars", "{{ none | tojson }} {{ true | tojson }} {{ 1.0 | tojson }} {{ 12 | tojson }} {{ 'x' | tojson }}", {}),
    ("items", "{% for k, v in {'a': 1, 'b': [2]} | items %}{{ k }}:{{ v }};{% endfor %}", {}),
    ("selectattr", "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }}", {"messages": MSGS}),
    ("rejectattr", "{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}", {"messages": MSGS}),
    ("selectattr_truthy", "{{ messages | selectattr('tool_calls') | list | length }} {{ messages | selectattr('tool_calls', 'none') | list | length }}", {"messages": MSGS}),
    ("select", "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ [1, 2, 3] | reject('lt', 2) | list }}", {}),
    ("map", "{{ ['a', 'b'] | map('upper') | join(',') }} {{ messages | map(attribute='role') | list }}", {"messages": MSGS}),
    ("join", "{{ [1, 2, 3] | join }} {{ ['a', 'b'] | join(', ') }} {{ messages | join(',', attribute='role') }}", {"messages": MSGS}),
    ("default", "{{ x | default('d') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ x | d('y') }}", {}),
    ("string", "{{ 1 | string }} {{ none | string }} {{ [1, 'a'] | string }} {{ {'a': 'b'} | string }}", {}),
    ("replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc'.replace('b', '') }} {{ 'ab' | replace('', '-') }}", {}),
    ("first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ [] | first }}|", {}),
    ("reverse_sort", "{{ [3, 1, 2] | sort | list }} {{ [3, 1, 2] | sort(reverse=true) | list }} {{ ['b', 'A', 'c'] | sort | list }} {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }}", {}),
    ("sort_attr", "{{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}", {"messages": MSGS}),
    ("numbers", "{{ '42' | int + 1 }} {{ 'x' | int }} {{ '3.5' | float }} {{ 3.7 | int }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.7 | round(0, 'floor') }}", {}),
    ("sum_min_max", "{{ [1, 2, 3] | sum }} {{ [1, 2, 3] | min }} {{ [1, 2, 3] | max }} {{ ['b', 'a'] | min }} {{ [1.5, 2] | sum }}", {}),
    ("unique_list", "{{ [1, 2, 1, 3, 2] | unique | list }} {{ 'ab' | list }}", {}),
    ("indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}", {}),
    ("dictsort", "{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}", {}),
    ("wordcount", "{{ 'one two  three' | wordcount }}", {}),
    ("batch", "{% for row in [1, 2, 3, 4, 5] | batch(2) %}{{ row }}{% endfor %}", {}),
    ("format", "{{ '%s and %s' | format('a', 1) }}", {}),
    # methods
    ("str_methods", "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nhi'.lstrip('\\n') }}|{{ 'hi  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'a-b-c'.rsplit('-', 1) }}", {}),
    ("str_methods2", "{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.upper() }} {{ 'Hi There'.lower() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }} {{ 'abcb'.find('b') }} {{ 'abcb'.count('b') }} {{ '-'.join(['a', 'b']) }}", {}),
    ("str_methods3", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'AB'.isupper() }} {{ 'x'.replace('x', 'y') }}", {}),
    ("think_split", "{% set c = '<think>\\nreason\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {}),
    ("dict_methods", "{% set d = {'a': 1, 'b': 2} %}{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }}", {}),
    ("message_get", "{{ messages[0].get('tool_calls') }} {{ messages[2].get('tool_calls') }} {{ messages[0].get('role') }}", {"messages": MSGS}),
    ("list_methods", "{{ [1, 2, 2].count(2) }} {{ [1, 2, 3].index(3) }}", {}),
    # tests
    ("tests", "{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ x is iterable }} {{ 1 is number }} {{ true is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }}", {}),
    ("tests2", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ true is boolean }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ [] is sequence }} {{ 'x' is sequence }}", {}),
    ("tests3", "{{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is ge 2 }} {{ 'a' is in 'abc' }} {{ 3 is in [1, 2] }} {{ x is not defined }} {{ none is not none }} {{ 1 is sameas 1 }} {{ range is callable }}", {}),
    ("is_filter_precedence", "{{ not x is defined }} {{ 'a' ~ 'b' is string }} {{ messages | length > 2 }}", {"messages": MSGS}),
    ("filter_precedence", "{{ 'x' + ' ab ' | trim + 'y' }} {{ -1 | abs }} {{ [1, 2] | length * 3 }}", {}),
    # globals
    ("range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(0, 10, 3) | list }} {{ range(5, 0, -2) | list }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }}", {}),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y') }} {{ strftime_now('%A') }}", {}),
    ("bos_eos", "{{ bos_token }}x{{ eos_token }}", {"bos_token": "<s>", "eos_token": "</s>"}),
    ("unknown_token_empty", "[{{ bos_token }}]", {}),
    # errors a template can hit
    ("err_raise", "{{ raise_exception('no system role') }}", {}),
    ("err_undefined_attr", "{{ x.y }}", {}),
    ("err_concat_int", "{{ 'a' + 1 }}", {}),
    ("err_div_zero", "{{ 1 // 0 }}", {}),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", {}),
    ("err_ns_assign", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("err_unpack", "{% set a, b = [1, 2, 3] %}", {}),
    ("err_syntax_if", "{% if %}{% endif %}", {}),
    ("err_unclosed_for", "{% for x in y %}", {}),
    ("err_unknown_tag", "{% frobnicate %}", {}),
    ("err_unknown_filter", "{{ 1 | nosuchfilter }}", {}),
    ("err_unclosed_string", "{{ 'abc }}", {}),
    ("err_unbalanced", "{{ (1 }}", {}),
    ("err_break_outside", "{% break %}", {}),
    ("err_include", "{% include 'other.jinja' %}", {}),
    ("err_mutate", "{% set l = [1] %}{{ l.append(2) }}", {}),
    ("err_range_big", "{% for i in range(1000000) %}{% endfor %}", {}),
    ("err_tojson_undefined", "{{ x | tojson }}", {}),
    ("err_compare_types", "{{ 1 < 'a' }}", {}),
    ("err_none_in", "{{ 'a' in none }}", {}),
]


def main():
    e = env()
    out = []
    for name, source, variables in CASES:
        case = {"name": name, "template": source, "vars": variables}
        try:
            case["expected"] = e.from_string(source).render(**variables)
        except Exception as exc:  # the interpreter must refuse it too
            case["error"] = type(exc).__name__
        out.append(case)
    json.dump({"generator": "tools/make_template_cases.py",
               "jinja2": jinja2.__version__, "cases": out},
              sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
