"""The knowledge corpus Z, apart from the pretraining corpus X (REALM §4: a system pretrained on
one corpus retrieves from another, and its knowledge can be read, replaced and grown without
training again). A trained system answers from a versioned knowledge corpus beside it:

- documents are added, changed and removed with `update`: only the blocks of new or changed
  documents are cut and embedded, with each tracked document encoder as it is (frozen), and
  every other block keeps its vector;
- each update publishes a whole new version beside the old ones and then switches one pointer
  (`CURRENT`) atomically; older versions stay, and `set_current` rolls back;
- block ids are stable: a block keeps its id in every version that holds it, and the id of a
  removed block is never given to another.

The first version is the pretraining corpus itself (`initial_version`), so a store whose users
never add a document answers as it did.

Layout, under `<artifact root>/knowledge/` (or an exported system's `knowledge/`):

    CURRENT               {"version": N}
    v00000001/            blocks.parquet: block_id, doc_id, source, doc_hash, title, text
                          vectors-<encoder hash>.npy: one row per block, in blocks.parquet's order
                          manifest.json: counts, tracked encoders, each file's size and sha256

Modules: `versions` (the versions on disk, the lock, the pointer, publishing), `update` (what a
new version holds), `add` (`realm add`: documents read, cut and embedded by a trained system's
own tokenizer and encoders; it sits above the stage graph, the others beside the store).

Shapes: N blocks of a version, D embedding dim, M the id range (the next free block id).
"""
