"""A recorded Metal compile error whose every error lies in a kernel's
signature (which MLX writes, so mlxsci cannot reproduce it) is told apart
from one in the body (mlxsci/import_metal_sci/recorded_errors.py). The logs
are written here in the shape Metal's compiler gives them."""

from mlxsci.import_metal_sci.recorded_errors import signature_error

SOURCE = """#include <metal_stdlib>
using namespace metal;

kernel void saxpy(device const float * restrict x [[buffer(0)]],
                  device float * y [[buffer(1)]],
                  constant float & a [[buffer(2)]],
                  constant uint & N [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    if (i >= N) return;
    y[i] = a * x[i] + y[i];
}
"""


def log(*errors) -> str:
    """A fail reason quoting Metal's log: (line, column, message) each."""
    lines = [
        f"program_source:{line}:{col}: error: {message}\n    some source text\n    ^"
        for line, col, message in errors
    ]
    return 'compile error: Error Domain=MTLLibraryErrorDomain Code=3 "' + "\n".join(lines) + '"'


def test_a_signature_error_and_the_names_it_leaves_undeclared():
    reason = log(
        (4, 49, "expected ')'"),
        (9, 9, "use of undeclared identifier 'i'"),
        (9, 14, "use of undeclared identifier 'N'"),
        (10, 5, "use of undeclared identifier 'y'"),
    )
    assert signature_error(SOURCE, reason) == "expected ')'"


def test_an_attribute_after_the_parameter_list():
    source = SOURCE.replace(
        "[[thread_position_in_grid]]) {",
        "[[thread_position_in_grid]])\n    [[max_total_threads_per_threadgroup(64)]] {",
    )
    reason = log((9, 5, "'max_total_threads_per_threadgroup' attribute cannot be applied to types"))
    assert "cannot be applied to types" in signature_error(source, reason)


def test_an_error_in_the_body_is_not_the_signatures():
    assert signature_error(SOURCE, log((10, 12, "use of undeclared identifier 'b'"))) is None
    # a signature error beside a body error of its own: Metal would refuse the body too
    both = log((4, 49, "expected ')'"), (10, 12, "no matching function for call to 'fmaa'"))
    assert signature_error(SOURCE, both) is None
    # an undeclared name the parameter list does not declare is the body's fault
    other = log((4, 49, "expected ')'"), (10, 12, "use of undeclared identifier 'alpha'"))
    assert signature_error(SOURCE, other) is None


def test_nothing_to_read():
    assert signature_error(SOURCE, None) is None
    assert signature_error(None, log((4, 1, "expected ')'"))) is None
    assert signature_error(SOURCE, "compile error: the pipeline could not be built") is None
    # a hostile, huge log is read only so far, and a line number past the source is no signature
    assert signature_error(SOURCE, log((999999, 1, "expected ')'")) * 1000) is None


def test_an_error_that_follows_from_a_lost_parameter_on_its_line():
    # Metal reads the lost `x` as another name (`exp`?) and then refuses what
    # the line does with it: a consequence of the signature, not the body's.
    reason = log(
        (4, 49, "expected ')'"),
        (10, 14, "use of undeclared identifier 'x'; did you mean 'exp'?"),
        (10, 14, "subscript of pointer to function type 'half (half)'"),
        (10, 5, "use of undeclared identifier 'y'"),
    )
    assert signature_error(SOURCE, reason) == "expected ')'"
    # the same error on a line where no lost parameter is used is the body's
    elsewhere = log(
        (4, 49, "expected ')'"),
        (10, 5, "use of undeclared identifier 'y'"),
        (9, 14, "subscript of pointer to function type 'half (half)'"),
    )
    assert signature_error(SOURCE, elsewhere) is None
    # and a name nothing declares stays the body's fault on such a line too
    typo = log(
        (4, 49, "expected ')'"),
        (10, 14, "use of undeclared identifier 'x'"),
        (10, 20, "use of undeclared identifier 'alpha'"),
    )
    assert signature_error(SOURCE, typo) is None
