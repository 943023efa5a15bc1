package tabletdesc

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrNotServing is matched (errors.Is) by *NotServingError: the request is
// for a row this tablet does not serve (now). The server answers
// FAILED_PRECONDITION with a tabletpb.NotServing detail (tabletpb's
// NotServingStatus) so that the client refreshes its location cache; the
// client's errors for "looked up again too often" match it too.
var ErrNotServing = errors.New("tablet not serving")

// NotServingError says why a tablet refused a request: the row is outside
// its range, or the tablet is closed or was split.
type NotServingError struct {
	Tablet string
	Row    []byte // nil when the whole tablet is not serving
	Reason string
}

func (e *NotServingError) Error() string {
	if e.Row != nil {
		return fmt.Sprintf("tablet %s: not serving row %s: %s", e.Tablet, strconv.Quote(string(e.Row)), e.Reason)
	}
	return fmt.Sprintf("tablet %s: not serving: %s", e.Tablet, e.Reason)
}

// Is makes errors.Is(err, ErrNotServing) true.
func (e *NotServingError) Is(target error) bool { return target == ErrNotServing }
