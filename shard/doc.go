// Package shard routes keys to N databases × M tables and runs the rare
// cross-shard query on all of them.
//
// Routing: table = xxhash(key) % (N×M), database = table / M, so a layout is
// fixed by its total table count — 256 tables in one database, 8 × 8 = 64,
// 8 × 32 = 256. Tables are named by their global number (links_000 …
// links_255): moving whole tables between databases later changes no route.
// Ids that carry a gene (idgen.Genes) route with ByGene to the same table as
// the key they were made for, provided the table count is a power of two no
// larger than 2^bits.
//
// Changing the table count re-routes almost every key; plan it as a data
// migration, not a configuration change. A Router is immutable and safe for
// concurrent use.
//
// Design notes, diagram and measured costs: docs/shard.md in the repository.
package shard
