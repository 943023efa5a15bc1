package pipe

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

func TestMissingFamilies(t *testing.T) {
	got := MissingFamilies([]string{"x", "f"}, []string{"language", "f", "anchor", "contents", "anchor"})
	if want := []string{"anchor", "contents", "language"}; !slices.Equal(got, want) {
		t.Fatalf("MissingFamilies = %v, want %v", got, want)
	}
	if got := MissingFamilies([]string{"f", "g"}, []string{"g", "f"}); len(got) != 0 {
		t.Fatalf("MissingFamilies of families the table has = %v", got)
	}
	err := error(MissingFamiliesError{Table: "users", Missing: []string{"anchor", "contents"}, Uses: "that the files use"})
	if want := "table users lacks families anchor, contents that the files use (use --create to add them)"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

// TestEnsureFamiliesWithoutCreate: without create, EnsureFamilies changes
// nothing — a table lacking families is an error naming the table and
// the families (use --create), and keeps its families; a missing table
// is an error and stays missing. With create it adds the families, or
// creates the table with them.
func TestEnsureFamiliesWithoutCreate(t *testing.T) {
	srv := devtest.StartT(t, cluster.DevConfig{})
	ctx := devtest.Context(t)
	c := Conn{Addr: srv.Addr, Project: devtest.Project, Instance: devtest.Instance}
	srv.CreateTable(t, "users", []string{"x"})
	need := []string{"language", "anchor", "contents", "x"}

	err := EnsureFamilies(ctx, c, "users", need, false, "that the copy of webtable writes")
	var mf MissingFamiliesError
	if !errors.As(err, &mf) || !slices.Equal(mf.Missing, []string{"anchor", "contents", "language"}) {
		t.Fatalf("EnsureFamilies without create: %v, want the table's missing families", err)
	}
	for _, s := range []string{"users", "anchor, contents, language", "--create"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if fams, err := Families(ctx, c, "users"); err != nil || !slices.Equal(fams, []string{"x"}) {
		t.Fatalf("families after a refused EnsureFamilies: %v %v, want [x]", fams, err)
	}
	// The families it has: nothing to do, create or not.
	if err := EnsureFamilies(ctx, c, "users", []string{"x"}, false, ""); err != nil {
		t.Fatalf("EnsureFamilies of the families the table has: %v", err)
	}

	err = EnsureFamilies(ctx, c, "absent", need, false, "")
	if err == nil || !strings.Contains(err.Error(), "absent") || !strings.Contains(err.Error(), "--create") {
		t.Fatalf("EnsureFamilies of a missing table without create: %v", err)
	}
	if _, err := srv.Admin.TableInfo(ctx, "absent"); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused EnsureFamilies left table absent: %v, want NotFound", err)
	}

	if err := EnsureFamilies(ctx, c, "users", need, true, ""); err != nil {
		t.Fatalf("EnsureFamilies with create: %v", err)
	}
	if fams, err := Families(ctx, c, "users"); err != nil || !slices.Equal(fams, []string{"anchor", "contents", "language", "x"}) {
		t.Fatalf("families after EnsureFamilies with create: %v %v", fams, err)
	}
	if err := EnsureFamilies(ctx, c, "absent", need, true, ""); err != nil {
		t.Fatalf("EnsureFamilies of a missing table with create: %v", err)
	}
	if fams, err := Families(ctx, c, "absent"); err != nil || !slices.Equal(fams, []string{"anchor", "contents", "language", "x"}) {
		t.Fatalf("families of the table EnsureFamilies created: %v %v", fams, err)
	}
}
