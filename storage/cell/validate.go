package cell

import (
	"errors"
	"fmt"
)

// Limits bound the size of what a client may write. Every limit is
// configurable by the servers' flags; DefaultLimits gives the defaults.
type Limits struct {
	MaxRowKeyBytes    int // the paper's 64 KiB
	MaxQualifierBytes int // 16 KiB
	MaxValueBytes     int // Cloud Bigtable's 100 MiB
	MaxMutations      int // Cloud Bigtable's 100,000 per request
}

// DefaultLimits returns the limits of ../DESIGN.md: row key ≤ 64 KiB,
// qualifier ≤ 16 KiB, value ≤ 100 MiB, ≤ 100,000 mutations per request.
func DefaultLimits() Limits {
	return Limits{
		MaxRowKeyBytes:    64 << 10,
		MaxQualifierBytes: 16 << 10,
		MaxValueBytes:     100 << 20,
		MaxMutations:      100_000,
	}
}

// ErrInvalidArgument is matched (errors.Is) by every validation error.
var ErrInvalidArgument = errors.New("invalid argument")

// InvalidArgumentError reports input that breaks a rule or a limit. Field
// names the offending field the way the Cloud Bigtable API spells it, with
// an index where there is one (for example "mutations[3].set_cell.value").
type InvalidArgumentError struct {
	Field  string
	Reason string
}

func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("invalid argument: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidArgument) true.
func (e *InvalidArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(field, format string, args ...any) error {
	return &InvalidArgumentError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ValidFamilyName reports whether name matches [_a-zA-Z0-9][-_.a-zA-Z0-9]*.
func ValidFamilyName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		case (c == '-' || c == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidateFamilyName returns an InvalidArgumentError for field when name is
// not a valid family name.
func ValidateFamilyName(field, name string) error {
	if !ValidFamilyName(name) {
		return invalid(field, "family name %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]*", name)
	}
	return nil
}

// ValidateRowKey checks a row key against the limits. The empty key is
// invalid: it is reserved for "the start of the table".
func (l Limits) ValidateRowKey(field string, key []byte) error {
	if len(key) == 0 {
		return invalid(field, "row key must not be empty")
	}
	if len(key) > l.MaxRowKeyBytes {
		return invalid(field, "row key is %d bytes, the limit is %d", len(key), l.MaxRowKeyBytes)
	}
	return nil
}

// ValidateRowMutation checks every mutation of rm against the limits and
// the rules of the data model. It checks everything before anything is
// applied, so an invalid row mutation changes nothing. Timestamps must
// already be assigned or be ServerTimestamp. Whether the families exist is
// the caller's check: it depends on the table's schema.
func (l Limits) ValidateRowMutation(rm RowMutation) error {
	if err := l.ValidateRowKey("row_key", rm.Row); err != nil {
		return err
	}
	if len(rm.Mutations) == 0 {
		return invalid("mutations", "no mutations given")
	}
	if len(rm.Mutations) > l.MaxMutations {
		return invalid("mutations", "%d mutations, the limit is %d", len(rm.Mutations), l.MaxMutations)
	}
	for i, m := range rm.Mutations {
		if err := l.validateMutation(i, m); err != nil {
			return err
		}
	}
	return nil
}

// validateMutation checks mutation i. Field names are built only for an
// error: validation runs for every mutation of every write.
func (l Limits) validateMutation(i int, m Mutation) error {
	field := func(sub string) string { return fmt.Sprintf("mutations[%d].%s.%s", i, m.Kind, sub) }
	switch m.Kind {
	case SetCell, DeleteFromColumn, DeleteFromFamily, AddToCell, MergeToCell:
		if !ValidFamilyName(m.Family) {
			return ValidateFamilyName(field("family_name"), m.Family)
		}
	case DeleteFromRow:
		return nil
	default:
		return invalid(fmt.Sprintf("mutations[%d]", i), "unknown mutation kind %d", m.Kind)
	}
	if m.Kind == DeleteFromFamily {
		return nil
	}
	if len(m.Qualifier) > l.MaxQualifierBytes {
		return invalid(field("column_qualifier"), "qualifier is %d bytes, the limit is %d", len(m.Qualifier), l.MaxQualifierBytes)
	}
	if m.Kind == SetCell {
		if m.Timestamp != ServerTimestamp && (m.Timestamp < 0 || m.Timestamp > MaxTimestamp) {
			return invalid(field("timestamp_micros"), "timestamp %d must be -1 (server-assigned) or in [0, %d]", m.Timestamp, MaxTimestamp)
		}
		if len(m.Value) > l.MaxValueBytes {
			return invalid(field("value"), "value is %d bytes, the limit is %d", len(m.Value), l.MaxValueBytes)
		}
		return nil
	}
	if m.Kind == AddToCell || m.Kind == MergeToCell {
		if m.Timestamp < 0 || m.Timestamp > MaxTimestamp {
			return invalid(field("timestamp"), "timestamp %d must be in [0, %d] (aggregate cells take no server-assigned timestamp)", m.Timestamp, MaxTimestamp)
		}
		if m.Kind == AddToCell && len(m.Value) != 8 {
			return invalid(field("input"), "an Int64 input is 8 bytes big-endian, got %d bytes", len(m.Value))
		}
		if len(m.Value) > l.MaxValueBytes {
			return invalid(field("input"), "value is %d bytes, the limit is %d", len(m.Value), l.MaxValueBytes)
		}
		return nil
	}
	if m.StartTimestamp < 0 {
		return invalid(field("time_range.start_timestamp_micros"), "must not be negative, got %d", m.StartTimestamp)
	}
	if m.EndTimestamp < 0 {
		return invalid(field("time_range.end_timestamp_micros"), "must not be negative, got %d", m.EndTimestamp)
	}
	if m.EndTimestamp != 0 && m.EndTimestamp < m.StartTimestamp {
		return invalid(field("time_range"), "end %d is before start %d", m.EndTimestamp, m.StartTimestamp)
	}
	return nil
}
