// Package rowfile is the one mapping between table rows (cell.Row) and files
// that every batch tool shares: MapReduce output and input, the Beam IO, and
// `tabula export` / `tabula import`. It knows three file formats, shard
// naming, and where shards live (a local directory or an S3/MinIO prefix).
//
// # Formats
//
// Parquet, template layout (Format Parquet). Byte-compatible in schema with
// Google's Cloud Bigtable → Parquet Dataflow template, whose records are the
// Avro record com.google.cloud.teleport.bigtable.BigtableRow written by
// parquet-avro (through Beam's ParquetIO) with its default settings:
//
//	message com.google.cloud.teleport.bigtable.BigtableRow {
//	  required binary key;
//	  required group cells (LIST) {
//	    repeated group array {
//	      required binary family (STRING);
//	      required binary qualifier;
//	      required int64 timestamp;
//	      required binary value;
//	    }
//	  }
//	}
//
// One record per row, every version of every column, each cell with its own
// timestamp in microseconds. The list is parquet-avro's two-level form (its
// default, parquet.avro.write-old-list-structure=true) because that is what
// the template writes; the template's importer, Arrow, DuckDB and Spark read
// it. The timestamp is a plain INT64: the template's Avro schema puts
// logicalType timestamp-micros on the field, where Avro ignores it.
//
// Readers accept more than the writer produces, so that files from the
// template with either list setting and from other tools import: the
// three-level list (LIST → repeated group → element group, as
// parquet-avro writes with write-old-list-structure=false, and pyarrow),
// the bare repeated group of the oldest writers, optional instead of
// required fields (a null qualifier or value reads as empty; a null key,
// family or timestamp is an invalid row), fields in any order, and a
// timestamp annotated INT(64, signed) or TIMESTAMP(MICROS). Anything else
// — a missing, extra or mistyped field, a timestamp in other units — is an
// ErrSchema at open time, naming the field.
//
// Parquet, columns layout (Format ParquetColumns), for analysts: a required
// binary column "key" and one optional binary column per family:qualifier
// holding that column's newest value (null when the row has none). The
// columns are fixed when the writer is made (ColumnsSchema). Timestamps and
// older versions are not kept, so this layout does not import back
// faithfully; its reader returns cells with timestamp 0.
//
// Files are written with data page V1 (the widest-read page format), PLAIN
// encoding for byte arrays, a dictionary for family names, and a codec per
// WriterOptions (snappy by default, as the template).
//
// JSON Lines (Format JSONL): one JSON object per line and row,
//
//	{"key":"<base64>","cells":[{"family":"f","qualifier":"<base64>","timestamp":1700000000000000,"value":"<base64>"}]}
//
// key, qualifier and value are standard base64 with padding (RFC 4648 §4,
// what encoding/json does with []byte), so binary data survives; family is
// a JSON string; timestamp is an integer of microseconds since the epoch.
// The reader takes any valid JSON object of this shape per line (fields in
// any order, whitespace, escapes; blank lines are skipped) and refuses
// unknown fields; a cell without family or timestamp is an error, a
// missing qualifier or value is empty.
//
// # Validation
//
// Every reader validates every row before returning it: non-empty key and
// the limits of cell.DefaultLimits, valid family names, timestamps in
// [0, cell.MaxTimestamp]. A bad row is an error (ErrInvalidRow) naming the
// file's row number and field, so an importer can check whole files before
// writing anything.
//
// # Shards and locations
//
// Shard i of n is PREFIX-SSSSS-of-NNNNN.EXT (ShardName), zero-based like the
// template. A Location is a directory or an s3:// prefix; shards are
// written under temporary names and appear under their final name only when
// committed whole, so a crash never leaves a file that looks finished.
package rowfile
