// Package jobs builds and runs the pipelines of pipelines/*: export (a
// table to Parquet files), import (Parquet files to a table), domaincount
// (pages and anchors per domain of the Webtable) and copy (a table to a
// table). Each Run function checks what it can before the pipeline
// starts — the server, the tables, the files' schemas — so that bad input
// is a clear error that changes nothing, then runs the pipeline on the
// runner the flags chose (prism by default).
package jobs
