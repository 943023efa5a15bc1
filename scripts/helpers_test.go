package scripts

import (
	"errors"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// testRow is the row most semantic tests run over.
var testRow = cell.Row{Key: []byte("com.example/a"), Cells: []cell.Cell{
	{Family: "anchor", Qualifier: []byte("com.x"), Timestamp: 30, Value: []byte("X")},
	{Family: "anchor", Qualifier: []byte("org.y"), Timestamp: 20, Value: []byte("Y")},
	{Family: "contents", Qualifier: []byte(""), Timestamp: 10, Value: []byte("<html>héllo</html>")},
	{Family: "language", Qualifier: []byte(""), Timestamp: 5, Value: []byte("en")},
}}

func mustCompile(t testing.TB, src string) *Program {
	t.Helper()
	p, err := Compile("test.szl", src)
	if err != nil {
		t.Fatalf("compile:\n%s\nerrors:\n%v", src, err)
	}
	return p
}

// runText compiles src, runs it over rows and returns the text output.
func runText(t testing.TB, src string, rows ...cell.Row) string {
	t.Helper()
	p := mustCompile(t, src)
	r := p.NewRun(Limits{})
	for _, row := range rows {
		if _, err := r.Process(row); err != nil {
			t.Fatalf("run:\n%s\nerror: %v", src, err)
		}
	}
	return r.Result().String()
}

// runErr compiles src, runs it over rows and returns the first error.
func runErr(t testing.TB, src string, limits Limits, rows ...cell.Row) error {
	t.Helper()
	p := mustCompile(t, src)
	r := p.NewRun(limits)
	for _, row := range rows {
		if _, err := r.Process(row); err != nil {
			return err
		}
	}
	return nil
}

func compileErrors(src string) []string {
	_, err := Compile("test.szl", src)
	var ce *CompileError
	if !errors.As(err, &ce) {
		return nil
	}
	var out []string
	for _, d := range ce.Diagnostics {
		out = append(out, d.String())
	}
	return out
}

func lines(s string) string { return strings.TrimSpace(s) }
