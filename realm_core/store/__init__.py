"""The artifact store: what every stage reads and writes, and nothing a stage computes.

- `artifacts`: the store itself, one folder of Parquet (or library-native) files and a manifest
  per artifact, published atomically and checked on read;
- `cache`: a stage's key (config, inputs, the code it runs) and `CachedStage`, the one path every
  cached stage takes from key to published artifact;
- `scratch`: run-scoped temporary folders under the store;
- `schemas`: the Parquet tables' columns;
- `versions`: numbered versions behind one `CURRENT` pointer (the MIPS index's, the knowledge
  corpus's), and the one writer of such pointers.
"""
