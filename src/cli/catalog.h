/* cli/catalog: gmlx pull --list - the curated models (data/catalog/catalog.tsv: name, hub ref,
 * size, and the file's header with its tokenizer arrays left out, as tools/catalog writes it),
 * each judged by the streaming plan for this machine from that header, as validate judges it. */
#ifndef GM_CLI_CATALOG_H
#define GM_CLI_CATALOG_H

#include <stdbool.h>

/* Prints the list under "fits in RAM", "streams from the SSD on this machine" and "cannot run
 * here" (json: an array of objects). The catalog's folder: GMLX_CATALOG, else the one the build
 * names. Returns an exit status. */
int gm_catalog_list(const char *cmd, bool json);
/* The REF of the entry called name (false when there is none). */
#include <stddef.h>
bool gm_catalog_ref(const char *name, char *ref, size_t len);

#endif
