"""mlxsci.protocol.launch_wire: a kernel launch's arrays and a fault's details
as they cross between mlxsci.fast's isolated calls and their worker, and the
worker's outputs read back as hostile input."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest

from mlxsci.protocol import launch_wire


def archive(tmp_path, members: dict, compress=zipfile.ZIP_STORED):
    path = tmp_path / "verified.npz"
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for name, array in members.items():
            buf = io.BytesIO()
            np.save(buf, array, allow_pickle=True)
            z.writestr(name, buf.getvalue())
    return path


def test_read_arrays_takes_only_what_was_asked_for(tmp_path):
    want = {"out_0": (np.dtype(np.float32), (4,))}
    good = archive(tmp_path, {"out_0.npy": np.arange(4, dtype=np.float32)})
    assert launch_wire.read_arrays(good, want, {"out_0"})["out_0"].tolist() == [0, 1, 2, 3]
    bad = {
        "compressed": ({"out_0.npy": np.zeros(4, np.float32)}, zipfile.ZIP_DEFLATED),
        "extra member": ({"out_0.npy": np.zeros(4, np.float32), "x.npy": np.zeros(1)}, 0),
        "pickled objects": ({"out_0.npy": np.array([{"a": 1}] * 4, dtype=object)}, 0),
        "big-endian": ({"out_0.npy": np.zeros(4, ">f4")}, 0),
        "missing": ({}, 0),
    }
    for members, compress in bad.values():
        path = archive(tmp_path, members, compress or zipfile.ZIP_STORED)
        with pytest.raises(launch_wire.BadAnswer):
            launch_wire.read_arrays(path, want, {"out_0"})
    (tmp_path / "verified.npz").write_bytes(b"PK not a zip")
    with pytest.raises(launch_wire.BadAnswer):
        launch_wire.read_arrays(tmp_path / "verified.npz", want, {"out_0"})


def test_details_keep_their_tuples_and_refuse_what_is_not_details():
    details = {"thread": (1, 2, 3), "index": (5,), "names": ["a"], "n": 3, "x": 0.5, "s": None}
    encoded = json.loads(json.dumps(launch_wire.encode_value(details)))
    assert launch_wire.decode_value(encoded) == details
    assert isinstance(launch_wire.decode_value(encoded)["thread"], tuple)
    deep = 1
    for _ in range(20):
        deep = ["list", [deep]]
    for garbage in ([1, 2], ["set", []], ["dict", [[1, 2]]], deep, 1 << 70, {"a": 1}):
        with pytest.raises(launch_wire.BadAnswer):
            launch_wire.decode_value(garbage)


def test_an_input_must_agree_with_its_shape_and_layout(tmp_path):
    inputs = launch_wire.Inputs()
    inputs.add("float32", np.arange(6, dtype=np.float32).reshape(2, 3))
    inputs.add("bfloat16", np.arange(4, dtype=np.uint16)[::2])  # "copied": not contiguous
    inputs.add_span("float32", (2, 3), np.arange(6, dtype=np.float32), 0, (3, 1))
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        launch_wire.write_new_file(dir_fd, "inputs.bin", inputs.chunks)
        with pytest.raises(FileExistsError):  # never over a file already there
            launch_wire.write_new_file(dir_fd, "inputs.bin", inputs.chunks)
        (tmp_path / "elsewhere").symlink_to(tmp_path / "target")
        with pytest.raises(OSError):  # nor through a link
            launch_wire.write_new_file(dir_fd, "elsewhere", inputs.chunks)
        assert not (tmp_path / "target").exists()
    finally:
        os.close(dir_fd)
    blob = (tmp_path / "inputs.bin").read_bytes()
    contiguous, copied, stored = (launch_wire.unpack_array(e, blob) for e in inputs.entries)
    assert contiguous.data.tolist() == list(range(6)) and contiguous.layout == "contiguous"
    assert copied.data.tolist() == [0, 2] and copied.layout == "copied"
    assert stored.strides == (3, 1) and stored.layout == "stored"
    entry = inputs.entries[0]
    wrong = ({"shape": [7]}, {"layout": "scattered"}, {"dtype": "float128"}, {"at": -1},
             {"nbytes": 1 << 40}, {"nbytes": 10})  # fmt: skip
    for change in wrong:
        with pytest.raises(launch_wire.BadAnswer):
            launch_wire.unpack_array(dict(entry, **change), blob)
    with pytest.raises(launch_wire.BadAnswer):
        launch_wire.unpack_array(dict(inputs.entries[2], strides=[30, 1]), blob)
