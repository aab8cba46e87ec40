"""The documentation site's generated pages: each reference page under docs/reference/ is
made here from the data it describes (the job file's fields, the task collection, the
catalogues, the price table, the synthesised stack), so a fact is typed once and a page
cannot drift from it: `invoke docs.reference` rewrites them, and a test fails when one is
stale. Nothing here is imported by the trainer or the launcher."""
