package tablet

import (
	"errors"
	"fmt"
)

// ErrFamilyNotFound is matched (errors.Is) by *FamilyNotFoundError.
var ErrFamilyNotFound = errors.New("column family not found")

// FamilyNotFoundError reports a mutation or read naming a family that is not
// in the tablet's schema. Nothing of the row mutation was applied.
type FamilyNotFoundError struct {
	Family string
	// Field names the offending field, as cell's validation errors do
	// ("mutations[2].set_cell.family_name"); empty for reads.
	Field string
}

func (e *FamilyNotFoundError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("column family %q not found", e.Family)
	}
	return fmt.Sprintf("%s: column family %q not found", e.Field, e.Family)
}

// Is makes errors.Is(err, ErrFamilyNotFound) true.
func (e *FamilyNotFoundError) Is(target error) bool { return target == ErrFamilyNotFound }

// ErrFailed is matched (errors.Is) by the errors a tablet returns after its
// commit log failed: no write is acknowledged any more, and the tablet must
// be closed and reopened (recovered from its log) by its server.
var ErrFailed = errors.New("tablet failed")

type failedError struct {
	tablet string
	cause  error
}

func (e *failedError) Error() string {
	return fmt.Sprintf("tablet %s failed: %v", e.tablet, e.cause)
}
func (e *failedError) Is(target error) bool { return target == ErrFailed }
func (e *failedError) Unwrap() error        { return e.cause }

// ErrSplit is matched (errors.Is) by *SplitError, returned by Open for a
// tablet whose state says it was split.
var ErrSplit = errors.New("tablet was split")

// SplitError is returned by Open for a tablet that was split: open its
// children instead.
type SplitError struct {
	Tablet   string
	Children []string // IDs of the children, left then right
}

func (e *SplitError) Error() string {
	return fmt.Sprintf("tablet %s was split into %v", e.Tablet, e.Children)
}

// Is makes errors.Is(err, ErrSplit) true.
func (e *SplitError) Is(target error) bool { return target == ErrSplit }

// ErrCannotSplit is returned by Split when the tablet has fewer than two
// rows, so that no key divides it.
var ErrCannotSplit = errors.New("tablet has no split key (fewer than two rows)")

// ErrStateConflict is matched by the StateStore of NewBlobStateStore's
// Save when the state changed since this store loaded or saved it:
// another server wrote it (the tablet was reassigned). Nothing was saved.
var ErrStateConflict = errors.New("tablet state changed by another writer")

// ErrStateNotFound is matched by StateStore.Load for a tablet that has no
// saved state.
var ErrStateNotFound = errors.New("tablet state not found")
