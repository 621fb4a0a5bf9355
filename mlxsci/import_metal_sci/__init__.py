"""Metal-Sci runs imported and re-scored: mlxsci as the audit tool for
published kernel searches (docs/metal-sci.md).

- `metal_run`: reading a Metal-Sci run directory, as hostile input.
- `metal_source`, `interfaces`, `convert`: a Metal-Sci kernel source (full
  Metal, `[[buffer(i)]]` signatures, in-place buffers) as an mlxsci candidate.
- `importer`: writing the imported run directory (`import_run`).
- `rescore`: every imported candidate evaluated under mlxsci's harness
  (`rescore`, `Settings`), into OUT/rescore.json.
- `records`: the files and the verdict vocabulary the report reads too.
- `__main__`: `python -m mlxsci.import_metal_sci` (`mlxsci import-metal-sci`).
"""
