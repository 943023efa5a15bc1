//go:build integration

package rowfile

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// duckdbNodePathEnv names the NODE_PATH under which deploy/test.sh
// installed @duckdb/node-api.
const duckdbNodePathEnv = "TABULA_TEST_DUCKDB_NODE_PATH"

// runDuckDB runs testdata/duckdb_check.js on files and decodes its JSON.
func runDuckDB(t *testing.T, mode string, files []string, v any) {
	t.Helper()
	nodePath := os.Getenv(duckdbNodePathEnv)
	if nodePath == "" {
		t.Fatalf("%s is not set: run through deploy/test.sh, which installs @duckdb/node-api", duckdbNodePathEnv)
	}
	script, err := filepath.Abs("testdata/duckdb_check.js")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{script, mode}, files...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node duckdb_check.js: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber() // lengths compare as written, not as floats
	if err := dec.Decode(v); err != nil {
		t.Fatalf("duckdb_check.js printed %q: %v", out, err)
	}
}

type duckTemplate struct {
	DuckDB   string      `json:"duckdb"`
	Describe [][2]string `json:"describe"`
	Rows     int         `json:"rows"`
	Cells    int         `json:"cells"`
	Keys     [][]any     `json:"keys"`
	CellRows [][]any     `json:"cellRows"`
}

// writeShards writes rows round-robin into n template-layout files under
// dir and returns their paths.
func writeShards(t *testing.T, dir string, rows []cell.Row, n int, opts WriterOptions) []string {
	t.Helper()
	var paths []string
	parts := make([][]cell.Row, n)
	for i, r := range rows {
		parts[i%n] = append(parts[i%n], r)
	}
	for i, part := range parts {
		p := filepath.Join(dir, ShardName("t", i, n, opts.Format.Ext()))
		if err := os.WriteFile(p, writeAll(t, part, opts), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// TestDuckDBReadsTemplate has DuckDB, a Parquet reader Tabula did not
// write, read template-layout shards: the schema it infers, the number of
// rows and cells, and every cell (key, family, qualifier, timestamp, and
// the md5 and length of the value) against what was written.
func TestDuckDBReadsTemplate(t *testing.T) {
	rows := testRows(250)
	for _, codec := range []Codec{Snappy, Zstd, Gzip, Uncompressed} {
		t.Run(codec.String(), func(t *testing.T) {
			files := writeShards(t, t.TempDir(), rows, 3, WriterOptions{Format: Parquet, Codec: codec, RowGroupBytes: 64 << 10})
			var got duckTemplate
			runDuckDB(t, "template", files, &got)
			t.Logf("DuckDB %s", got.DuckDB)
			wantDescribe := [][2]string{
				{"key", "BLOB"},
				{"cells", "STRUCT(\"family\" VARCHAR, qualifier BLOB, \"timestamp\" BIGINT, \"value\" BLOB)[]"},
			}
			if !slices.Equal(got.Describe, wantDescribe) {
				t.Errorf("DuckDB schema %q, want %q", got.Describe, wantDescribe)
			}
			wantCells := 0
			var wantKeys, wantCellRows [][]any
			sorted := slices.Clone(rows)
			slices.SortFunc(sorted, func(a, b cell.Row) int { return bytes.Compare(a.Key, b.Key) })
			for _, r := range sorted {
				wantCells += len(r.Cells)
				wantKeys = append(wantKeys, []any{strings.ToUpper(hex.EncodeToString(r.Key)), json.Number(fmt.Sprint(len(r.Cells)))})
				cells := slices.Clone(r.Cells)
				slices.SortStableFunc(cells, cell.CompareCells)
				for _, c := range cells {
					sum := md5.Sum(c.Value)
					wantCellRows = append(wantCellRows, []any{
						strings.ToUpper(hex.EncodeToString(r.Key)), c.Family, strings.ToUpper(hex.EncodeToString(c.Qualifier)),
						fmt.Sprint(c.Timestamp), hex.EncodeToString(sum[:]), json.Number(fmt.Sprint(len(c.Value))),
					})
				}
			}
			if got.Rows != len(rows) || got.Cells != wantCells {
				t.Fatalf("DuckDB counts %d rows, %d cells; wrote %d, %d", got.Rows, got.Cells, len(rows), wantCells)
			}
			if fmt.Sprint(got.Keys) != fmt.Sprint(wantKeys) {
				t.Errorf("DuckDB keys and cell counts differ from those written")
			}
			if len(got.CellRows) != len(wantCellRows) {
				t.Fatalf("DuckDB unnests %d cells, wrote %d", len(got.CellRows), len(wantCellRows))
			}
			for i := range wantCellRows {
				if fmt.Sprint(got.CellRows[i]) != fmt.Sprint(wantCellRows[i]) {
					t.Fatalf("cell %d: DuckDB reads %v, wrote %v", i, got.CellRows[i], wantCellRows[i])
				}
			}
		})
	}
}

// TestDuckDBReadsColumns has DuckDB read a columns-layout file: one
// nullable BLOB column per chosen column with the newest value.
func TestDuckDBReadsColumns(t *testing.T) {
	rows := testRows(120)
	cols := []Column{{Family: "contents", Qualifier: []byte("x")}, {Family: "a", Qualifier: []byte("y")}}
	// Give the rows these two UTF-8 columns.
	for i := range rows {
		for j := range rows[i].Cells {
			c := &rows[i].Cells[j]
			switch {
			case c.Family == "contents" && c.Qualifier[0] == 1:
				c.Qualifier = []byte("x")
			case c.Family == "a" && c.Qualifier[0] == 0:
				c.Qualifier = []byte("y")
			}
		}
	}
	files := writeShards(t, t.TempDir(), rows, 1, WriterOptions{Format: ParquetColumns, Columns: cols})
	var got struct {
		Describe [][2]string `json:"describe"`
		Rows     int         `json:"rows"`
		Values   [][]any     `json:"values"`
	}
	runDuckDB(t, "columns", files, &got)
	want := [][2]string{{"key", "BLOB"}, {"contents:x", "BLOB"}, {"a:y", "BLOB"}}
	if !slices.Equal(got.Describe, want) {
		t.Errorf("DuckDB schema %q, want %q", got.Describe, want)
	}
	if got.Rows != len(rows) || len(got.Values) != len(rows) {
		t.Fatalf("DuckDB reads %d rows (%d values), wrote %d", got.Rows, len(got.Values), len(rows))
	}
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b cell.Row) int { return bytes.Compare(a.Key, b.Key) })
	for i, r := range sorted {
		wantRow := []any{strings.ToUpper(hex.EncodeToString(r.Key))}
		for _, c := range cols {
			if v, ok := newestValue(r, c); ok {
				wantRow = append(wantRow, strings.ToUpper(hex.EncodeToString(v)))
			} else {
				wantRow = append(wantRow, nil)
			}
		}
		if fmt.Sprint(got.Values[i]) != fmt.Sprint(wantRow) {
			t.Fatalf("row %d: DuckDB reads %v, wrote %v", i, got.Values[i], wantRow)
		}
	}
}

// TestReadDuckDBWritten: DuckDB writes rows as a Parquet file of the
// template's record (its own layout: a three-level list, every field
// optional, the timestamp INT_64); rowfile reads every row back.
func TestReadDuckDBWritten(t *testing.T) {
	rows := smallRows(150)
	dir := t.TempDir()
	var in bytes.Buffer
	for _, r := range rows {
		type hexCell struct {
			Family    string `json:"family"`
			Qualifier string `json:"qualifier"`
			Timestamp int64  `json:"timestamp"`
			Value     string `json:"value"`
		}
		line := struct {
			Key   string    `json:"key"`
			Cells []hexCell `json:"cells"`
		}{Key: hex.EncodeToString(r.Key), Cells: []hexCell{}}
		for _, c := range r.Cells {
			line.Cells = append(line.Cells, hexCell{c.Family, hex.EncodeToString(c.Qualifier), c.Timestamp, hex.EncodeToString(c.Value)})
		}
		b, err := json.Marshal(line)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(b, '\n'))
	}
	rowsFile, out := filepath.Join(dir, "rows.jsonl"), filepath.Join(dir, "duckdb.parquet")
	if err := os.WriteFile(rowsFile, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Schema [][]any `json:"schema"`
	}
	runDuckDB(t, "write", []string{rowsFile, out}, &res)
	t.Logf("DuckDB's schema: %v", res.Schema)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, data, ReaderOptions{Name: "duckdb.parquet"})
	if len(got) != len(rows) {
		t.Fatalf("read %d rows of DuckDB's file, wrote %d", len(got), len(rows))
	}
	slices.SortFunc(got, func(a, b cell.Row) int { return bytes.Compare(a.Key, b.Key) })
	want := slices.Clone(rows)
	slices.SortFunc(want, func(a, b cell.Row) int { return bytes.Compare(a.Key, b.Key) })
	for i := range want {
		if !rowsEqual(normalize(got)[i], normalize(want)[i]) {
			t.Fatalf("row %d: read %s, DuckDB wrote %s", i, describeRow(got[i]), describeRow(want[i]))
		}
	}
}
