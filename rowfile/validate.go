package rowfile

import (
	"errors"
	"fmt"

	"github.com/tabuladb/tabula/storage/cell"
)

// ErrInvalidRow is matched (errors.Is) by every error about a row that
// breaks the data model or a limit.
var ErrInvalidRow = errors.New("rowfile: invalid row")

// RowError reports a row that breaks a rule: which row of the file
// (zero-based), which field, and why.
type RowError struct {
	File   string // the file's name, when the reader was given one
	Row    int64  // zero-based position in the file
	Field  string // "key", "cells[3].family", ...
	Reason string
}

func (e *RowError) Error() string {
	where := fmt.Sprintf("row %d", e.Row)
	if e.File != "" {
		where = e.File + ": " + where
	}
	return fmt.Sprintf("rowfile: %s: invalid %s: %s", where, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidRow) true.
func (e *RowError) Is(target error) bool { return target == ErrInvalidRow }

// ValidateRow checks one row against the data model and limits: a
// non-empty key within MaxRowKeyBytes, and for every cell a valid family
// name, a qualifier within MaxQualifierBytes, a value within MaxValueBytes
// and a timestamp in [0, cell.MaxTimestamp]. The error is a *RowError
// with Row set to n.
func ValidateRow(row cell.Row, limits cell.Limits, n int64) error {
	bad := func(field, format string, args ...any) error {
		return &RowError{Row: n, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(row.Key) == 0 {
		return bad("key", "row key must not be empty")
	}
	if len(row.Key) > limits.MaxRowKeyBytes {
		return bad("key", "row key is %d bytes, the limit is %d", len(row.Key), limits.MaxRowKeyBytes)
	}
	for i, c := range row.Cells {
		switch {
		case !cell.ValidFamilyName(c.Family):
			return bad(fmt.Sprintf("cells[%d].family", i), "family name %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]*", c.Family)
		case len(c.Qualifier) > limits.MaxQualifierBytes:
			return bad(fmt.Sprintf("cells[%d].qualifier", i), "qualifier is %d bytes, the limit is %d", len(c.Qualifier), limits.MaxQualifierBytes)
		case len(c.Value) > limits.MaxValueBytes:
			return bad(fmt.Sprintf("cells[%d].value", i), "value is %d bytes, the limit is %d", len(c.Value), limits.MaxValueBytes)
		case c.Timestamp < 0 || c.Timestamp > cell.MaxTimestamp:
			return bad(fmt.Sprintf("cells[%d].timestamp", i), "timestamp %d must be in [0, %d] microseconds", c.Timestamp, cell.MaxTimestamp)
		}
	}
	return nil
}

// limitsOrDefault returns l, or cell.DefaultLimits when l is the zero value.
func limitsOrDefault(l cell.Limits) cell.Limits {
	if l == (cell.Limits{}) {
		return cell.DefaultLimits()
	}
	return l
}

// rowBytes is the payload size of a row: key, and per cell family,
// qualifier, value and 8 bytes of timestamp.
func rowBytes(row cell.Row) int64 {
	n := int64(len(row.Key))
	for _, c := range row.Cells {
		n += int64(len(c.Family) + len(c.Qualifier) + len(c.Value) + 8)
	}
	return n
}
