package rowfile

import (
	"fmt"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
)

// Format is a file format and layout.
type Format int

const (
	// Parquet is the template layout: one record per row, every version.
	Parquet Format = iota
	// ParquetColumns is the columns layout: one column per family:qualifier,
	// newest value only.
	ParquetColumns
	// JSONL is JSON Lines, one object per row, every version.
	JSONL
)

// String returns the name ParseFormat accepts.
func (f Format) String() string {
	switch f {
	case Parquet:
		return "parquet"
	case ParquetColumns:
		return "parquet-columns"
	case JSONL:
		return "jsonl"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Ext is the file name extension of the format, without the dot: "parquet"
// for both Parquet layouts, "jsonl" for JSON Lines.
func (f Format) Ext() string {
	if f == JSONL {
		return "jsonl"
	}
	return "parquet"
}

// ParseFormat parses a format name: "parquet" (also "template"),
// "parquet-columns" (also "columns"), "jsonl" (also "json"). Case is
// ignored. Anything else is an error listing the names.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "parquet", "template":
		return Parquet, nil
	case "parquet-columns", "columns":
		return ParquetColumns, nil
	case "jsonl", "json":
		return JSONL, nil
	}
	return 0, fmt.Errorf("rowfile: unknown format %q: want parquet, parquet-columns or jsonl", s)
}

// Codec is a Parquet compression codec.
type Codec int

const (
	// Snappy is the default, as in the template and parquet-mr.
	Snappy Codec = iota
	// Uncompressed stores pages as they are.
	Uncompressed
	// Zstd compresses best at a moderate cost.
	Zstd
	// Gzip is the most widely read after snappy.
	Gzip
)

// String returns the name ParseCodec accepts.
func (c Codec) String() string {
	switch c {
	case Snappy:
		return "snappy"
	case Uncompressed:
		return "none"
	case Zstd:
		return "zstd"
	case Gzip:
		return "gzip"
	}
	return fmt.Sprintf("Codec(%d)", int(c))
}

// ParseCodec parses a codec name: snappy, none (also "uncompressed"), zstd,
// gzip. Case is ignored; "" is snappy.
func ParseCodec(s string) (Codec, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "snappy":
		return Snappy, nil
	case "none", "uncompressed":
		return Uncompressed, nil
	case "zstd":
		return Zstd, nil
	case "gzip":
		return Gzip, nil
	}
	return 0, fmt.Errorf("rowfile: unknown codec %q: want snappy, zstd, gzip or none", s)
}

func (c Codec) parquetCodec() (compress.Codec, error) {
	switch c {
	case Snappy:
		return &parquet.Snappy, nil
	case Uncompressed:
		return &parquet.Uncompressed, nil
	case Zstd:
		return &parquet.Zstd, nil
	case Gzip:
		return &parquet.Gzip, nil
	}
	return nil, fmt.Errorf("rowfile: unknown codec %d", int(c))
}
