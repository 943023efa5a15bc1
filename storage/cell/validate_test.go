package cell

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateRowMutation(t *testing.T) {
	l := Limits{MaxRowKeyBytes: 8, MaxQualifierBytes: 4, MaxValueBytes: 10, MaxMutations: 2}
	ok := Set("f", []byte("q"), ServerTimestamp, []byte("v"))
	cases := []struct {
		name  string
		rm    RowMutation
		field string // empty: valid
	}{
		{"valid", RowMutation{Row: []byte("r"), Mutations: []Mutation{ok, DeleteRow()}}, ""},
		{"empty row", RowMutation{Mutations: []Mutation{ok}}, "row_key"},
		{"long row", RowMutation{Row: []byte("123456789"), Mutations: []Mutation{ok}}, "row_key"},
		{"no mutations", RowMutation{Row: []byte("r")}, "mutations"},
		{"too many", RowMutation{Row: []byte("r"), Mutations: []Mutation{ok, ok, ok}}, "mutations"},
		{"bad family", RowMutation{Row: []byte("r"), Mutations: []Mutation{Set("-x", nil, 0, nil)}}, "mutations[0].set_cell.family_name"},
		{"long qualifier", RowMutation{Row: []byte("r"), Mutations: []Mutation{ok, Set("f", []byte("12345"), 0, nil)}}, "mutations[1].set_cell.column_qualifier"},
		{"long value", RowMutation{Row: []byte("r"), Mutations: []Mutation{Set("f", nil, 0, make([]byte, 11))}}, "mutations[0].set_cell.value"},
		{"bad timestamp", RowMutation{Row: []byte("r"), Mutations: []Mutation{Set("f", nil, -5, nil)}}, "mutations[0].set_cell.timestamp_micros"},
		{"inverted range", RowMutation{Row: []byte("r"), Mutations: []Mutation{DeleteColumn("f", nil, 10, 5)}}, "mutations[0].delete_from_column.time_range"},
		{"open range", RowMutation{Row: []byte("r"), Mutations: []Mutation{DeleteColumn("f", nil, 10, 0)}}, ""},
	}
	for _, c := range cases {
		err := l.ValidateRowMutation(c.rm)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", c.name, err)
			}
			continue
		}
		var ia *InvalidArgumentError
		if !errors.As(err, &ia) || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want an InvalidArgumentError", c.name, err)
			continue
		}
		if ia.Field != c.field {
			t.Errorf("%s: field %q, want %q (%v)", c.name, ia.Field, c.field, err)
		}
	}
	err := l.ValidateRowMutation(RowMutation{Row: []byte("123456789"), Mutations: []Mutation{ok}})
	if !strings.Contains(err.Error(), "limit is 8") {
		t.Errorf("error does not name the limit: %v", err)
	}
}

func TestFamilyNames(t *testing.T) {
	for _, n := range []string{"a", "_x", "9", "a-b.c_d"} {
		if !ValidFamilyName(n) {
			t.Errorf("%q rejected", n)
		}
	}
	for _, n := range []string{"", "-a", ".a", "a b", "a:b", "é"} {
		if ValidFamilyName(n) {
			t.Errorf("%q accepted", n)
		}
	}
}

func TestAssignTimestamps(t *testing.T) {
	rm := RowMutation{Row: []byte("r"), Mutations: []Mutation{Set("f", nil, ServerTimestamp, nil), Set("f", nil, 5, nil)}}
	rm.AssignTimestamps(1000)
	if rm.Mutations[0].Timestamp != 1000 || rm.Mutations[1].Timestamp != 5 {
		t.Fatalf("got %+v", rm.Mutations)
	}
}
