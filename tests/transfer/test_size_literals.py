"""The scan of a candidate's source for literals of the task's listed sizes
(mlxsci/transfer/size_literals.py), on snippets of heat2d candidates.

heat2d's listed values: NX and NY 67/45 (smoke), 256, 512, 1024 (in-dist),
768 (held-out); n_steps 5, 50, 100, 75; defaults 256, 256, 50."""

import pytest

from mlxsci.task import load_task
from mlxsci.transfer.size_literals import (
    MAX_FINDINGS,
    ScanError,
    integer_value,
    scan,
    size_values,
)

TASK = load_task("heat2d")
HEAD = "//! kernel heat_step\n"  # line 1: the body starts on line 2


def found(body: str, dialect: str = "metal", header: str = ""):
    text = (f"//! header\n{header}" if header else "") + HEAD + body
    return scan(TASK, text, dialect)


def values(findings):
    return [(f.kind, f.value, f.line) for f in findings]


@pytest.mark.parametrize(
    "text, value",
    [
        ("256", 256),
        ("256u", 256),
        ("256U", 256),
        ("256ul", 256),
        ("256LL", 256),
        ("256llu", 256),
        ("0x300", 768),
        ("0X300u", 768),
        ("01400", 768),
        ("0b100000000", 256),
        ("1'024", 1024),
        ("0", 0),
        ("256.0f", None),
        ("1e3", None),
        ("256_km", None),
        ("0x", None),
    ],
)
def test_integer_literals_in_every_spelling(text, value):
    assert integer_value(text) == value


def test_the_values_of_heat2d_listed_sizes_and_their_sets():
    table = size_values(TASK)
    assert table[768] == (("NX", "NY"), ("held-out",))
    assert table[256] == (("NX", "NY"), ("in-dist", "default"))
    assert table[67] == (("NX",), ("smoke",))
    assert table[75] == (("n_steps",), ("held-out",))
    assert 16 not in table


def test_comparisons_with_suffixed_and_hex_literals_at_their_lines():
    body = (
        "uint i = thread_position_in_grid.x;\n"  # line 2
        "if (NX == 256u) {\n"  # 3
        "    u_out[i] = u_in[i];\n"
        "} else if (0x300 != NY) {\n"  # 5
        "    return;\n"
        "}\n"
        "bool wide = NX >= (1'024);\n"  # 8
        "bool tall = NY < 01400u;\n"  # 9
    )
    got = found(body)
    assert values(got) == [
        ("comparison", 256, 3),
        ("comparison", 768, 5),
        ("comparison", 1024, 8),
        ("comparison", 768, 9),
    ]
    assert got[0].what == "comparison `NX == 256u`"
    assert got[1].what == "comparison `0x300 != NY`"
    assert got[2].what == "comparison `NX >= (1'024)`"
    assert [f.held_out_only for f in got] == [False, True, False, True]


def test_zero_and_one_and_unlisted_values_are_ignored():
    body = (
        "uint i = thread_position_in_grid.x;\n"
        "if (i == 0 || i >= NX - 1 || NX > 1u || i == 16u) {\n"
        "    return;\n"
        "}\n"
        "float c = i < 256.0f ? 4.0f : 5.0f;\n"  # floats never count
    )
    assert found(body) == []


def test_values_in_comments_and_strings_are_ignored():
    body = (
        "// if (NX == 768u) we could special-case\n"
        "/* case 512: a note\n"
        "   NY == 1024 */\n"
        'constant char* note = "NX == 256";\n'
        "u_out[0] = u_in[0];\n"
    )
    assert found(body) == []


def test_case_labels_plain_and_parenthesised():
    body = (
        "switch (NX) {\n"  # 2
        "case 512:\n"  # 3
        "    break;\n"
        "case (768u):\n"  # 5
        "    break;\n"
        "case 16:\n"
        "    break;\n"
        "}\n"
    )
    got = found(body)
    assert values(got) == [("case", 512, 3), ("case", 768, 5)]
    assert got[1].what == "case label `case 768u:`"


def test_template_arguments_and_parameters_in_header_and_body():
    header = (
        "template <uint N = 1024>\n"  # line 2
        "inline float pick(float v) { return v * N; }\n"
    )
    body = (
        "float v = pick<0x200>(u_in[0]);\n"  # line 5 (header 2-3, kernel line 4)
        "float w = pick<16>(v) + pick<256u>(v);\n"  # 6
        "u_out[0] = v + w;\n"
    )
    got = found(body, header=header)
    assert values(got) == [("template", 1024, 2), ("template", 512, 5), ("template", 256, 6)]
    assert got[0].what.startswith("template parameter `template <uint N = 1024>`")
    assert got[1].what == "template argument `pick<0x200>`"


def test_a_less_than_is_a_comparison_unless_it_closes_as_a_template():
    body = (
        "uint i = thread_position_in_grid.x;\n"
        "if (NX < 768u && i > 0) {\n"  # 5: `&&` ends any template list
        "    return;\n"
        "}\n"
        "for (uint k = 0; k < 512u; ++k) {\n"  # 8: `;` ends it
        "    u_out[k] = u_in[k];\n"
        "}\n"
        "if (pick<16>(u_in[0]) > 1024) {\n"  # 11: a template, then a comparison
        "    return;\n"
        "}\n"
    )
    got = found(body, header="template <uint N> inline float pick(float v) { return v; }\n")
    assert values(got) == [("comparison", 768, 5), ("comparison", 512, 8), ("comparison", 1024, 11)]


def test_cuda_candidates_are_scanned_alike():
    body = "uint32_t nx = NX[0];\nif (nx == 67u) {\n    return;\n}\n"
    got = found(body, dialect="cuda")
    assert values(got) == [("comparison", 67, 3)]
    assert got[0].sets == ("smoke",) and got[0].params == ("NX",)


def test_the_evidence_item_of_a_finding():
    (finding,) = found("if (NX == 768u) {\n    return;\n}\n")
    assert finding.to_evidence() == {
        "what": "comparison `NX == 768u`: NX, NY = 768 in held-out (held-out only)",
        "where": "line 2",
        "numbers": {
            "value": 768,
            "params": ["NX", "NY"],
            "sets": ["held-out"],
            "held_out_only": True,
        },
    }


def test_findings_are_bounded():
    body = "".join(f"if (NX == 256u) {{ u_out[{k}] = 0.0f; }}\n" for k in range(MAX_FINDINGS + 50))
    assert len(found(body)) == MAX_FINDINGS


@pytest.mark.parametrize(
    "text, needle",
    [
        ("u_out[0] = 0.0f;\n", "code before"),  # no `//! kernel` line
        (HEAD + "/* never closed\nu_out[0] = 0.0f;\n", "unterminated"),
        (HEAD + "u_out[0] = 0.0f; ??/\n", "trigraph"),
    ],
)
def test_a_source_that_cannot_be_read_is_a_scan_error(text, needle):
    with pytest.raises(ScanError, match=needle):
        scan(TASK, text, "metal", "bad.metal")
