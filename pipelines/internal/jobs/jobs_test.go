package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
)

func conn() pipe.Conn { return pipe.Conn{Addr: dev.Addr, Project: "tabula", Instance: "dev"} }

func sameRows(t *testing.T, got, want []cell.Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if devtest.Digest(got[i]) != devtest.Digest(want[i]) {
			t.Fatalf("row %d: %s, want %s", i, devtest.Digest(got[i]), devtest.Digest(want[i]))
		}
	}
}

// TestExportImportRoundTrip exports a table of ten tablets (every
// version) to Parquet shards, checks them with Arrow's pqarrow (a reader
// Tabula did not write), imports them into a new table and compares
// every cell, timestamps included, through the official client.
func TestExportImportRoundTrip(t *testing.T) {
	dev.CreateTable(t, "src", []string{"f", "g"}, "r00100", "r00200", "r00300", "r00400", "r00500", "r00600", "r00700", "r00800", "r00900")
	dev.WriteRows(t, "src", devtest.Rows(1000))
	want := dev.ReadRows(t, "src", bigtable.InfiniteRange(""))
	dir := t.TempDir()
	ctx := devtest.Context(t)
	sum, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("src")}, Out: dir, Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	cells := 0
	for _, r := range want {
		cells += len(r.Cells)
	}
	if sum.Rows != int64(len(want)) || sum.Cells != int64(cells) || len(sum.Files) != 3 {
		t.Fatalf("export summary %+v, want %d rows, %d cells, 3 files", sum, len(want), cells)
	}
	// Arrow reads every shard: rows and cells add up.
	var arrowRows, arrowCells int64
	for i := range 3 {
		name := filepath.Join(dir, fmt.Sprintf("src-%05d-of-00003.parquet", i))
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := file.NewParquetReader(f)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(ctx)
		if err != nil {
			t.Fatalf("arrow reads %s: %v", name, err)
		}
		arrowRows += tbl.NumRows()
		cellsCol := tbl.Column(1)
		for _, chunk := range cellsCol.Data().Chunks() {
			arrowCells += int64(chunk.Data().Children()[0].Len())
		}
		tbl.Release()
		f.Close()
	}
	if arrowRows != int64(len(want)) || arrowCells != int64(cells) {
		t.Fatalf("arrow reads %d rows, %d cells; want %d, %d", arrowRows, arrowCells, len(want), cells)
	}
	// Export again under the same prefix: refused, nothing overwritten.
	if _, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("src")}, Out: dir, Shards: 3}); err == nil || !strings.Contains(err.Error(), "already holds shards") {
		t.Fatalf("second export: %v", err)
	}
	isum, err := Import(ctx, ImportConfig{In: dir, Conn: conn(), Table: "dst", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if isum.Rows != int64(len(want)) || isum.Cells != int64(cells) {
		t.Fatalf("import summary %+v", isum)
	}
	sameRows(t, dev.ReadRows(t, "dst", bigtable.InfiniteRange("")), want)
}

func TestExportColumnsLayout(t *testing.T) {
	dev.CreateTable(t, "cols", []string{"f", "g"}, "r00050")
	dev.WriteRows(t, "cols", devtest.Rows(100))
	dir := t.TempDir()
	ctx := devtest.Context(t)
	_, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("cols")}, Out: dir, Shards: 2, Format: rowfile.ParquetColumns})
	if err != nil {
		t.Fatal(err)
	}
	// Read back with parquet-go: key plus one column per family:qualifier.
	var rows int64
	for i := range 2 {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("cols-%05d-of-00002.parquet", i)))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range pf.Schema().Fields() {
			names = append(names, c.Name())
		}
		if got := strings.Join(names, " "); got != "key f:a f:b g:c" {
			t.Fatalf("columns %q, want key f:a f:b g:c", got)
		}
		rows += pf.NumRows()
		f.Close()
	}
	if rows != 100 {
		t.Fatalf("%d rows in the columns files, want 100", rows)
	}
}

// TestExportGivenColumns: the columns layout with the columns given
// (--columns): the files hold those columns, in order, and every row.
func TestExportGivenColumns(t *testing.T) {
	dev.CreateTable(t, "gcols", []string{"f", "g"}, "r00050")
	dev.WriteRows(t, "gcols", devtest.Rows(100))
	dir := t.TempDir()
	ctx := devtest.Context(t)
	cols := []rowfile.Column{{Family: "g", Qualifier: []byte("c")}, {Family: "f", Qualifier: []byte("a")}}
	if _, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("gcols")}, Out: dir, Shards: 2, Format: rowfile.ParquetColumns, Columns: cols}); err != nil {
		t.Fatal(err)
	}
	var rows int64
	for i := range 2 {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("gcols-%05d-of-00002.parquet", i)))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range pf.Schema().Fields() {
			names = append(names, c.Name())
		}
		if got := strings.Join(names, " "); got != "key f:a g:c" {
			t.Fatalf("columns %q, want key f:a g:c", got)
		}
		rows += pf.NumRows()
		f.Close()
	}
	if rows != 100 {
		t.Fatalf("%d rows in the columns files, want 100", rows)
	}
}

// writeWrongSchema writes a Parquet file that is not in the template's
// schema under a shard name.
func writeWrongSchema(t *testing.T, dir, name string) {
	type other struct {
		Key  []byte `parquet:"key"`
		Name string `parquet:"name"`
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, []other{{Key: []byte("r1"), Name: "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImportBadFilesWriteNothing: a shard set with one file of another
// schema, or one that is not Parquet, fails the import before any row is
// written — the good shard's rows included.
func TestImportBadFilesWriteNothing(t *testing.T) {
	dev.CreateTable(t, "good", []string{"f", "g"})
	dev.WriteRows(t, "good", devtest.Rows(50))
	ctx := devtest.Context(t)
	for _, tc := range []struct {
		name    string
		bad     func(dir string)
		wantErr error
	}{
		{"wrong schema", func(dir string) { writeWrongSchema(t, dir, "good-00001-of-00002.parquet") }, rowfile.ErrSchema},
		{"not parquet", func(dir string) {
			os.WriteFile(filepath.Join(dir, "good-00001-of-00002.parquet"), []byte("this is not a parquet file at all"), 0o644)
		}, rowfile.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("good")}, Out: dir, Shards: 2}); err != nil {
				t.Fatal(err)
			}
			tc.bad(dir)
			target := "target" + strings.ReplaceAll(tc.name, " ", "")
			dev.CreateTable(t, target, []string{"f"})
			_, err := Import(ctx, ImportConfig{In: dir, Conn: conn(), Table: target})
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), "good-00001-of-00002.parquet") {
				t.Fatalf("import: %v, want %v naming the file", err, tc.wantErr)
			}
			if rows := dev.ReadRows(t, target, bigtable.InfiniteRange("")); len(rows) != 0 {
				t.Fatalf("%d rows written by a failed import", len(rows))
			}
			if fams, err := pipe.Families(ctx, conn(), target); err != nil || !slices.Equal(fams, []string{"f"}) {
				t.Fatalf("families after a failed import: %v %v", fams, err)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	ctx := devtest.Context(t)
	dir := t.TempDir()
	// A missing table.
	_, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("nosuch")}, Out: dir})
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("export of a missing table: %v", err)
	}
	_, err = Copy(ctx, CopyConfig{Read: beamio.ReadConfig{Table: conn().Table("nosuch")}, DstTable: "x"})
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("copy of a missing table: %v", err)
	}
	// An unreachable server.
	dead := pipe.Conn{Addr: "127.0.0.1:1"}
	_, err = DomainCount(ctx, DomainCountConfig{Read: beamio.ReadConfig{Table: dead.Table("webtable")}, Out: "d"})
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("domaincount against an unreachable server: %v", err)
	}
	// No shards where the import looks.
	_, err = Import(ctx, ImportConfig{In: dir, Conn: conn(), Table: "x", Create: true})
	if err == nil || !strings.Contains(err.Error(), "--in "+dir+" holds no shards") {
		t.Fatalf("import of an empty directory: %v, want that it holds no shards", err)
	}
	// Import into a missing table without --create.
	dev.CreateTable(t, "few", []string{"f", "g"})
	dev.WriteRows(t, "few", devtest.Rows(5))
	if _, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("few")}, Out: dir, Shards: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = Import(ctx, ImportConfig{In: dir, Conn: conn(), Table: "absent"})
	if err == nil || !strings.Contains(err.Error(), "--create") {
		t.Fatalf("import into a missing table: %v", err)
	}
}

// webtableRows writes n rows of a small Webtable (families anchor,
// contents, language) to table.
func webtableRows(t *testing.T, table string, n int) {
	var rms []cell.RowMutation
	for i := range n {
		rms = append(rms, cell.RowMutation{Row: []byte(fmt.Sprintf("com.example/page%03d", i)), Mutations: []cell.Mutation{
			cell.Set("contents", nil, 1_000_000, []byte("<html>…</html>")),
			cell.Set("language", nil, 1_000_000, []byte("en")),
			cell.Set("anchor", []byte("ref.example"), 1_000_000, []byte("link")),
		}})
	}
	dev.WriteRows(t, table, rms)
}

// unchanged fails t unless table has exactly families and no rows.
func unchanged(t *testing.T, table string, families ...string) {
	t.Helper()
	if fams, err := pipe.Families(devtest.Context(t), conn(), table); err != nil || !slices.Equal(fams, families) {
		t.Fatalf("families of %s after the refused run: %v %v, want %v", table, fams, err, families)
	}
	if rows := dev.ReadRows(t, table, bigtable.InfiniteRange("")); len(rows) != 0 {
		t.Fatalf("the refused run wrote %d rows to %s", len(rows), table)
	}
}

// TestCopyRefusesMissingFamilies: without Create (--create), a copy into
// an existing table that lacks the source's families, or into a missing
// table, fails before anything is written, saying which families and to
// use --create; the table keeps its families and gets no rows. With
// Create the same copy adds the families and copies.
func TestCopyRefusesMissingFamilies(t *testing.T) {
	ctx := devtest.Context(t)
	dev.CreateTable(t, "cpfam_web", []string{"anchor", "contents", "language"})
	webtableRows(t, "cpfam_web", 20)
	dev.CreateTable(t, "cpfam_users", []string{"contents"})
	cfg := CopyConfig{Read: beamio.ReadConfig{Table: conn().Table("cpfam_web")}, DstTable: "cpfam_users"}
	_, err := Copy(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "table cpfam_users lacks families anchor, language") || !strings.Contains(err.Error(), "use --create") {
		t.Fatalf("copy into a table lacking families: %v, want that it lacks anchor, language (use --create)", err)
	}
	unchanged(t, "cpfam_users", "contents")
	// --families selects what is copied: those the table lacks count.
	cfg.Read.Families = []string{"contents", "anchor"}
	if _, err := Copy(ctx, cfg); err == nil || !strings.Contains(err.Error(), "lacks families anchor ") {
		t.Fatalf("copy of anchor and contents into a table lacking anchor: %v", err)
	}
	unchanged(t, "cpfam_users", "contents")
	cfg.Read.Families = nil
	// A missing table is not created either.
	_, err = Copy(ctx, CopyConfig{Read: cfg.Read, DstTable: "cpfam_absent"})
	if err == nil || !strings.Contains(err.Error(), "cpfam_absent") || !strings.Contains(err.Error(), "--create") {
		t.Fatalf("copy into a missing table: %v", err)
	}
	if _, err := pipe.Families(ctx, conn(), "cpfam_absent"); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("a refused copy created its table: %v", err)
	}
	// With Create: the families are added and the rows copied.
	cfg.Create = true
	sum, err := Copy(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Entries != 20 {
		t.Fatalf("%d entries copied, want 20", sum.Entries)
	}
	if fams, err := pipe.Families(ctx, conn(), "cpfam_users"); err != nil || !slices.Equal(fams, []string{"anchor", "contents", "language"}) {
		t.Fatalf("families after copy --create: %v %v", fams, err)
	}
	sameRows(t, dev.ReadRows(t, "cpfam_users", bigtable.InfiniteRange("")), dev.ReadRows(t, "cpfam_web", bigtable.InfiniteRange("")))
}

// TestImportRefusesMissingFamilies: without Create (--create), an
// import into an existing table that lacks families the files use fails
// with nothing written, saying which families and to use --create; the
// table keeps its families. With Create the families are added and the
// rows imported.
func TestImportRefusesMissingFamilies(t *testing.T) {
	ctx := devtest.Context(t)
	dev.CreateTable(t, "imfam_web", []string{"anchor", "contents", "language"})
	webtableRows(t, "imfam_web", 30)
	dir := t.TempDir()
	if _, err := Export(ctx, ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("imfam_web")}, Out: dir, Shards: 2}); err != nil {
		t.Fatal(err)
	}
	dev.CreateTable(t, "imfam_scratch", []string{"x", "contents"})
	cfg := ImportConfig{In: dir, Conn: conn(), Table: "imfam_scratch"}
	_, err := Import(ctx, cfg)
	if want := "table imfam_scratch lacks families anchor, language that the files use (use --create to add them) (nothing written)"; err == nil || err.Error() != want {
		t.Fatalf("import into a table lacking families: %v, want %q", err, want)
	}
	unchanged(t, "imfam_scratch", "contents", "x")
	cfg.Create = true
	sum, err := Import(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rows != 30 {
		t.Fatalf("%d rows imported, want 30", sum.Rows)
	}
	if fams, err := pipe.Families(ctx, conn(), "imfam_scratch"); err != nil || !slices.Equal(fams, []string{"anchor", "contents", "language", "x"}) {
		t.Fatalf("families after import --create: %v %v", fams, err)
	}
	sameRows(t, dev.ReadRows(t, "imfam_scratch", bigtable.InfiniteRange("")), dev.ReadRows(t, "imfam_web", bigtable.InfiniteRange("")))
}

// TestImportInput: a missing --in is an error naming it and the reason
// (and the import does not create it), a file is not a directory, and
// an existing directory without shards says it holds none.
func TestImportInput(t *testing.T) {
	ctx := devtest.Context(t)
	missing := filepath.Join(t.TempDir(), "nonexistent")
	for _, in := range []string{missing, "file://" + missing} {
		_, err := Import(ctx, ImportConfig{In: in, Conn: conn(), Table: "iminput", Create: true})
		if want := "--in " + in + ": no such file or directory"; err == nil || err.Error() != want {
			t.Fatalf("import of a missing directory: %v, want %q", err, want)
		}
		var ue pipe.UsageError
		if errors.As(err, &ue) {
			t.Errorf("a missing --in is a usage error (exit 2): %v", err)
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the import created its missing input %s: %v", missing, err)
		}
	}
	// --prefix given: the same.
	if _, err := Import(ctx, ImportConfig{In: missing, Prefix: "p", Conn: conn(), Table: "iminput", Create: true}); err == nil || !strings.Contains(err.Error(), "--in "+missing+": no such file or directory") {
		t.Fatalf("import of a missing directory with --prefix: %v", err)
	}
	file := filepath.Join(t.TempDir(), "f.parquet")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(ctx, ImportConfig{In: file, Conn: conn(), Table: "iminput", Create: true}); err == nil || err.Error() != "--in "+file+": not a directory" {
		t.Fatalf("import of a file: %v", err)
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Import(ctx, ImportConfig{In: empty, Conn: conn(), Table: "iminput", Create: true})
	if want := "--in " + empty + " holds no shards: no files named PREFIX-SSSSS-of-NNNNN.parquet"; err == nil || err.Error() != want {
		t.Fatalf("import of a directory without shards: %v, want %q", err, want)
	}
	if _, err := pipe.Families(ctx, conn(), "iminput"); err == nil {
		t.Fatal("a failed import created its table")
	}
}

// TestDomainCount counts pages and anchors per domain of a small
// Webtable and compares with a count made directly through the official
// client.
func TestDomainCount(t *testing.T) {
	dev.CreateTable(t, "webtable", []string{"contents", "anchor", "language"}, "com.m", "org")
	var rms []cell.RowMutation
	sites := []string{"com.cnn.www", "com.example", "org.wikipedia.en", "com.bbc.www", "uk.co.bbc.www"}
	for i := range 300 {
		site := sites[i%len(sites)]
		key := []byte(fmt.Sprintf("%s/page%d", site, i))
		ms := []cell.Mutation{cell.Set("contents", nil, 1_000_000, []byte("<html>…</html>")), cell.Set("contents", nil, 2_000_000, []byte("<html>v2</html>")),
			cell.Set("language", nil, 1_000_000, []byte("en"))}
		for a := range i % 4 {
			ms = append(ms, cell.Set("anchor", []byte(fmt.Sprintf("ref%d.example", a)), 1_000_000, []byte("link")))
			ms = append(ms, cell.Set("anchor", []byte(fmt.Sprintf("ref%d.example", a)), 2_000_000, []byte("link v2")))
		}
		rms = append(rms, cell.RowMutation{Row: key, Mutations: ms})
	}
	dev.WriteRows(t, "webtable", rms)
	// The direct count.
	want := map[string]DomainCounts{}
	err := dev.Data.Open("webtable").ReadRows(devtest.Context(t), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		d, c := CountRow(devtest.FromOfficial(r))
		if c.Anchors > 0 {
			// The direct count sees every version: count columns.
			cols := map[string]bool{}
			for _, it := range r[FamilyAnchor] {
				cols[it.Column] = true
			}
			c.Anchors = int64(len(cols))
		}
		w := want[d]
		want[d] = addCounts(w, c)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := DomainCount(devtest.Context(t), DomainCountConfig{Read: beamio.ReadConfig{Table: conn().Table("webtable")}, Out: "domains", Timestamp: 5_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(want)) {
		t.Fatalf("%d domains written, want %d", n, len(want))
	}
	got := map[string]DomainCounts{}
	for _, r := range dev.ReadRows(t, "domains", bigtable.InfiniteRange("")) {
		var c DomainCounts
		for _, cl := range r.Cells {
			if cl.Timestamp != 5_000_000 {
				t.Fatalf("cell %v: timestamp %d, want the job's 5000000", cl, cl.Timestamp)
			}
			switch string(cl.Qualifier) {
			case ColumnPages:
				c.Pages = int64(beUint(cl.Value))
			case ColumnAnchors:
				c.Anchors = int64(beUint(cl.Value))
			}
		}
		got[string(r.Key)] = c
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts\n%v\nwant\n%v", got, want)
	}
}

func beUint(b []byte) uint64 {
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

// TestCopy copies a range of a table with its timestamps into a new
// table and compares.
func TestCopy(t *testing.T) {
	dev.CreateTable(t, "from", []string{"f", "g"}, "r00040")
	dev.WriteRows(t, "from", devtest.Rows(120))
	sum, err := Copy(devtest.Context(t), CopyConfig{Read: beamio.ReadConfig{Table: conn().Table("from"), Ranges: []beamio.RowRange{{Start: []byte("r00010"), End: []byte("r00100")}}},
		DstTable: "to", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Entries != 90 {
		t.Fatalf("%d entries copied, want 90", sum.Entries)
	}
	sameRows(t, dev.ReadRows(t, "to", bigtable.InfiniteRange("")), dev.ReadRows(t, "from", bigtable.NewRange("r00010", "r00100")))
}

// TestBinaries builds the import, export and copy binaries and checks
// their exits: --help lists the flags and exits 0; a wrong-schema file,
// a missing --in, or a destination lacking families without --create
// exits 1 with the reason; a bad flag exits 2.
func TestBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: builds binaries")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../../import", "../../export", "../../copy")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(name string, args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run("export", "--help")
	for _, f := range []string{"-addr", "-project", "-instance", "-table", "-out", "-prefix", "-shards", "-layout", "-codec", "-start", "-end", "-filter", "-start-time", "-runner", "-endpoint"} {
		if !strings.Contains(out, f+" ") && !strings.Contains(out, f+"\n") {
			t.Errorf("export --help does not list %s", f)
		}
	}
	if code != 0 {
		t.Errorf("export --help exited %d", code)
	}
	dir := t.TempDir()
	writeWrongSchema(t, dir, "w-00000-of-00001.parquet")
	dev.CreateTable(t, "bin", []string{"f"})
	out, code = run("import", "--addr", dev.Addr, "--in", dir, "--table", "bin")
	if code != 1 || !strings.Contains(out, "w-00000-of-00001.parquet") || !strings.Contains(out, "schema") {
		t.Fatalf("import of a wrong-schema file: exit %d, output\n%s", code, out)
	}
	if rows := dev.ReadRows(t, "bin", bigtable.InfiniteRange("")); len(rows) != 0 {
		t.Fatalf("%d rows written", len(rows))
	}
	missing := filepath.Join(t.TempDir(), "nonexistent")
	out, code = run("import", "--addr", dev.Addr, "--in", missing, "--table", "bin", "--create")
	if code != 1 || !strings.Contains(out, "import: --in "+missing+": no such file or directory") {
		t.Fatalf("import of a missing --in: exit %d, output\n%s", code, out)
	}
	dev.CreateTable(t, "binweb", []string{"anchor", "contents", "language"})
	webtableRows(t, "binweb", 10)
	dev.CreateTable(t, "binusers", []string{"contents"})
	out, code = run("copy", "--addr", dev.Addr, "--table", "binweb", "--dst-table", "binusers")
	if code != 1 || !strings.Contains(out, "copy: table binusers lacks families anchor, language that the copy of binweb writes (use --create to add them)") {
		t.Fatalf("copy into a table lacking families: exit %d, output\n%s", code, out)
	}
	unchanged(t, "binusers", "contents")
	out, code = run("export", "--addr", dev.Addr, "--table", "bin", "--out", dir, "--layout", "sideways")
	if code != 2 || !strings.Contains(out, "--layout") {
		t.Fatalf("bad --layout: exit %d, output\n%s", code, out)
	}
	out, code = run("export", "--addr", "127.0.0.1:1", "--table", "bin", "--out", t.TempDir())
	if code != 1 || !strings.Contains(out, "unreachable") {
		t.Fatalf("unreachable server: exit %d, output\n%s", code, out)
	}
}
