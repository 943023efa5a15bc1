package rowfile

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"
	"github.com/tabuladb/tabula/storage/cell"
)

// ErrSchema is matched (errors.Is) by every error about a file whose schema
// is not the one a reader expects.
var ErrSchema = errors.New("rowfile: schema mismatch")

// SchemaError says which field of a file's schema is missing or wrong.
type SchemaError struct {
	Field  string // dotted path, e.g. "cells.array.timestamp"; "" for the root
	Reason string
}

func (e *SchemaError) Error() string {
	if e.Field == "" {
		return "rowfile: schema mismatch: " + e.Reason
	}
	return fmt.Sprintf("rowfile: schema mismatch: field %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrSchema) true.
func (e *SchemaError) Is(target error) bool { return target == ErrSchema }

func schemaErr(field, format string, args ...any) error {
	return &SchemaError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// TemplateMessageName is the name of the root of the template schema: the
// full name of the Avro record, as parquet-avro names it.
const TemplateMessageName = "com.google.cloud.teleport.bigtable.BigtableRow"

// TemplateAvroSchema is the template's Avro schema, stored in each file's
// key/value metadata under "parquet.avro.schema" as parquet-avro does, so
// Avro-based readers (the template's importer among them) find the record
// they expect.
const TemplateAvroSchema = `{"type":"record","name":"BigtableRow","namespace":"com.google.cloud.teleport.bigtable","fields":[{"name":"key","type":"bytes"},{"name":"cells","type":{"type":"array","items":{"type":"record","name":"BigtableCell","fields":[{"name":"family","type":"string"},{"name":"qualifier","type":"bytes"},{"name":"timestamp","type":"long","logicalType":"timestamp-micros"},{"name":"value","type":"bytes"}]}}}]}`

// Leaf column indexes of the template schema as the writer lays it out.
const (
	colKey = iota
	colFamily
	colQualifier
	colTimestamp
	colValue
	templateColumns
)

// TemplateSchema returns the Parquet schema of the template layout (see the
// package documentation), fields in the template's order.
func TemplateSchema() *parquet.Schema {
	plainBytes := parquet.Encoded(parquet.Leaf(parquet.ByteArrayType), &parquet.Plain)
	cellGroup := &group{fields: []parquet.Field{
		field("family", parquet.Encoded(parquet.String(), &parquet.RLEDictionary)),
		field("qualifier", plainBytes),
		field("timestamp", parquet.Leaf(plainInt64{parquet.Int64Type})),
		field("value", plainBytes),
	}}
	cells := &group{
		typ:    parquet.List(parquet.Leaf(parquet.ByteArrayType)).Type(), // the LIST annotation
		fields: []parquet.Field{field("array", parquet.Repeated(cellGroup))},
	}
	root := &group{fields: []parquet.Field{
		field("key", plainBytes),
		field("cells", cells),
	}}
	return parquet.NewSchema(TemplateMessageName, root)
}

// plainInt64 is INT64 without parquet-go's INT(64, signed) annotation, as
// parquet-avro writes an Avro long.
type plainInt64 struct{ parquet.Type }

func (plainInt64) LogicalType() *format.LogicalType { return nil }

// Column is one column of the columns layout.
type Column struct {
	Family    string
	Qualifier []byte
}

// Name is the column's name in a columns-layout file: "family:qualifier".
func (c Column) Name() string { return c.Family + ":" + string(c.Qualifier) }

// ParseColumn parses "family:qualifier" (the qualifier may be empty or
// contain colons; the family may not).
func ParseColumn(s string) (Column, error) {
	fam, qual, ok := strings.Cut(s, ":")
	if !ok {
		return Column{}, fmt.Errorf("rowfile: column %q: want family:qualifier", s)
	}
	if !cell.ValidFamilyName(fam) {
		return Column{}, fmt.Errorf("rowfile: column %q: family name %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]*", s, fam)
	}
	return Column{Family: fam, Qualifier: []byte(qual)}, nil
}

// ColumnsSchema returns the schema of the columns layout for cols, in the
// order given: "key", then one optional binary column per entry. Column
// names must be unique, their families valid, their qualifiers valid UTF-8
// (a Parquet column name is a string), and none may be named "key".
func ColumnsSchema(cols []Column) (*parquet.Schema, error) {
	if len(cols) == 0 {
		return nil, errors.New("rowfile: columns layout: no columns given")
	}
	seen := map[string]bool{"key": true}
	fields := []parquet.Field{field("key", parquet.Encoded(parquet.Leaf(parquet.ByteArrayType), &parquet.Plain))}
	for i, c := range cols {
		name := c.Name()
		switch {
		case !cell.ValidFamilyName(c.Family):
			return nil, fmt.Errorf("rowfile: columns[%d]: family name %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]*", i, c.Family)
		case !utf8.Valid(c.Qualifier):
			return nil, fmt.Errorf("rowfile: columns[%d]: qualifier %q is not valid UTF-8 and cannot name a Parquet column", i, c.Qualifier)
		case seen[name]:
			return nil, fmt.Errorf("rowfile: columns[%d]: column %q given twice", i, name)
		}
		seen[name] = true
		fields = append(fields, field(name, parquet.Optional(parquet.Encoded(parquet.Leaf(parquet.ByteArrayType), &parquet.Plain))))
	}
	return parquet.NewSchema("tabula_columns", &group{fields: fields}), nil
}

// group is a Parquet group whose fields keep the order they are given in
// (parquet.Group sorts them by name) and which may carry a logical type
// (LIST for the template's cells). The writer only writes prebuilt rows,
// so the reflection methods are never needed.
type group struct {
	typ    parquet.Type // nil: a plain group
	fields []parquet.Field
}

func (g *group) ID() int                     { return 0 }
func (g *group) String() string              { return "group" }
func (g *group) Optional() bool              { return false }
func (g *group) Repeated() bool              { return false }
func (g *group) Required() bool              { return true }
func (g *group) Leaf() bool                  { return false }
func (g *group) Fields() []parquet.Field     { return g.fields }
func (g *group) Encoding() encoding.Encoding { return nil }
func (g *group) Compression() compress.Codec { return nil }

func (g *group) Type() parquet.Type {
	if g.typ != nil {
		return g.typ
	}
	return parquet.Group{}.Type()
}

func (g *group) GoType() reflect.Type {
	fields := make([]reflect.StructField, len(g.fields))
	for i, f := range g.fields {
		fields[i] = reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: f.GoType()}
	}
	return reflect.StructOf(fields)
}

// namedField gives a node its name in its parent.
type namedField struct {
	parquet.Node
	name string
}

func field(name string, n parquet.Node) parquet.Field { return namedField{Node: n, name: name} }

func (f namedField) Name() string { return f.name }

func (f namedField) Value(base reflect.Value) reflect.Value {
	panic("rowfile: schema nodes do not map Go values")
}

// templateLayout locates the five leaf columns of a template-layout file
// and the definition levels that say whether a cell or a value is present.
type templateLayout struct {
	col [templateColumns]int // file column index of each leaf
	// maxDef is each leaf's maximum definition level (value present).
	maxDef [templateColumns]int
	// cellDef is the definition level at which a list entry exists (the
	// repeated node is defined); below it the row has no cells.
	cellDef int
	// elemDef is the level at which the element group is non-null; it
	// equals cellDef unless the element is optional (three-level lists
	// from some writers).
	elemDef int
}

// checkTemplate checks a file schema against the template layout and
// locates its columns. Errors are SchemaErrors naming the field.
func checkTemplate(root parquet.Node) (templateLayout, error) {
	var lay templateLayout
	fields := root.Fields()
	key := fieldByName(fields, "key")
	if key == nil {
		return lay, schemaErr("key", "missing (want binary key)")
	}
	cellsF := fieldByName(fields, "cells")
	if cellsF == nil {
		return lay, schemaErr("cells", "missing (want a list of {family, qualifier, timestamp, value})")
	}
	for _, f := range fields {
		if f.Name() != "key" && f.Name() != "cells" {
			return lay, schemaErr(f.Name(), "unexpected field (the template has only key and cells)")
		}
	}
	if err := checkBinary("key", key, false); err != nil {
		return lay, err
	}

	// Walk cells to the cell group: a LIST holding a repeated group that
	// is the cell (two-level, what parquet-avro writes by default) or that
	// holds the cell as its one child (three-level, the Parquet spec's
	// form), or a bare repeated group (the oldest form).
	def := 0
	path := "cells"
	var elem parquet.Node
	switch {
	case cellsF.Repeated():
		if cellsF.Leaf() {
			return lay, schemaErr("cells", "want a list of cell groups, got repeated %s", cellsF.Type())
		}
		def++
		lay.cellDef = def
		elem = cellsF
	case cellsF.Leaf() || !isListNode(cellsF):
		return lay, schemaErr("cells", "want a group annotated LIST, got %s", nodeKind(cellsF))
	default:
		if cellsF.Optional() {
			def++
		}
		inner := cellsF.Fields()
		if len(inner) != 1 || !inner[0].Repeated() || inner[0].Leaf() {
			return lay, schemaErr("cells", "LIST must hold exactly one repeated group")
		}
		rep := inner[0]
		path += "." + rep.Name()
		def++
		lay.cellDef = def
		elem = rep
		if sub := rep.Fields(); len(sub) == 1 && !sub[0].Leaf() {
			path += "." + sub[0].Name()
			elem = sub[0]
			if sub[0].Repeated() {
				return lay, schemaErr(path, "element must not be repeated")
			}
			if sub[0].Optional() {
				def++
			}
		}
	}
	lay.elemDef = def

	want := [...]string{"family", "qualifier", "timestamp", "value"}
	cellFields := elem.Fields()
	for _, f := range cellFields {
		if !slices.Contains(want[:], f.Name()) {
			return lay, schemaErr(path+"."+f.Name(), "unexpected field (a cell has family, qualifier, timestamp, value)")
		}
	}
	leafDef := [templateColumns]int{}
	for i, name := range want {
		f := fieldByName(cellFields, name)
		p := path + "." + name
		if f == nil {
			return lay, schemaErr(p, "missing")
		}
		var err error
		if name == "timestamp" {
			err = checkTimestamp(p, f)
		} else {
			err = checkBinary(p, f, name == "family")
		}
		if err != nil {
			return lay, err
		}
		leafDef[colFamily+i] = def
		if f.Optional() {
			leafDef[colFamily+i] = def + 1
		}
	}
	// Column indexes: leaves in depth-first order.
	idx := 0
	var walk func(n parquet.Node, path []string)
	paths := map[string]int{}
	walk = func(n parquet.Node, path []string) {
		if n.Leaf() {
			paths[strings.Join(path, ".")] = idx
			idx++
			return
		}
		for _, f := range n.Fields() {
			walk(f, append(path, f.Name()))
		}
	}
	walk(root, nil)
	lay.col[colKey] = paths["key"]
	lay.maxDef[colKey] = 0
	if key.Optional() {
		lay.maxDef[colKey] = 1
	}
	for i, name := range want {
		lay.col[colFamily+i] = paths[path+"."+name]
		lay.maxDef[colFamily+i] = leafDef[colFamily+i]
	}
	return lay, nil
}

func fieldByName(fields []parquet.Field, name string) parquet.Field {
	for _, f := range fields {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

func isListNode(n parquet.Node) bool {
	if lt := n.Type().LogicalType(); lt != nil {
		if _, ok := lt.Value.(*format.ListType); ok {
			return true
		}
	}
	ct := n.Type().ConvertedType()
	return ct != nil && *ct == deprecated.List
}

func nodeKind(n parquet.Node) string {
	if n.Leaf() {
		return n.Type().String()
	}
	return "a plain group"
}

// checkBinary accepts a required or optional BYTE_ARRAY leaf; a string
// (family) may be annotated STRING, bytes must be unannotated or STRING.
func checkBinary(path string, n parquet.Node, isString bool) error {
	if !n.Leaf() {
		return schemaErr(path, "want binary, got a group")
	}
	if n.Repeated() {
		return schemaErr(path, "want a single binary value, got a repeated field")
	}
	if n.Type().Kind() != parquet.ByteArray {
		return schemaErr(path, "want binary, got %s", n.Type())
	}
	if lt := n.Type().LogicalType(); lt != nil && lt.Value != nil && !isStringType(lt) {
		return schemaErr(path, "want binary%s, got %s", map[bool]string{true: " (STRING)"}[isString], n.Type())
	}
	return nil
}

// checkTimestamp accepts INT64, unannotated or TIMESTAMP(MICROS).
func checkTimestamp(path string, n parquet.Node) error {
	if !n.Leaf() || n.Repeated() {
		return schemaErr(path, "want int64 microseconds, got %s", nodeKind(n))
	}
	if n.Type().Kind() != parquet.Int64 {
		return schemaErr(path, "want int64 microseconds, got %s", n.Type())
	}
	if lt := n.Type().LogicalType(); lt != nil && lt.Value != nil {
		if it, ok := lt.Value.(*format.IntType); ok && it.BitWidth == 64 && it.IsSigned {
			return nil
		}
		ts, ok := lt.Value.(*format.TimestampType)
		if !ok {
			return schemaErr(path, "want int64 microseconds, got %s", n.Type())
		}
		if _, micros := ts.Unit.Value.(*format.MicroSeconds); !micros {
			return schemaErr(path, "want int64 microseconds, got %s", n.Type())
		}
	}
	return nil
}

func isStringType(lt *format.LogicalType) bool {
	_, ok := lt.Value.(*format.StringType)
	return ok
}

// columnsLayout locates the columns of a columns-layout file.
type columnsLayout struct {
	keyCol  int      // file column index of the key
	keyDef  int      // definition level of a present key (1 if optional)
	columns []Column // the value columns, in file order
	colIdx  []int    // file column index of columns[i]
	maxDef  []int    // definition level of a present value of columns[i]
}

// checkColumns checks a columns-layout schema: a binary key and binary
// columns named family:qualifier, all flat.
func checkColumns(root parquet.Node) (columnsLayout, error) {
	var lay columnsLayout
	keyFound := false
	for i, f := range root.Fields() {
		if !f.Leaf() {
			return lay, schemaErr(f.Name(), "the columns layout is flat; got a group")
		}
		if f.Name() == "key" {
			if err := checkBinary("key", f, false); err != nil {
				return lay, err
			}
			keyFound = true
			lay.keyCol = i
			if f.Optional() {
				lay.keyDef = 1
			}
			continue
		}
		c, err := ParseColumn(f.Name())
		if err != nil {
			return lay, schemaErr(f.Name(), "not a family:qualifier column name")
		}
		if err := checkBinary(f.Name(), f, false); err != nil {
			return lay, err
		}
		def := 0
		if f.Optional() {
			def = 1
		}
		lay.columns = append(lay.columns, c)
		lay.colIdx = append(lay.colIdx, i)
		lay.maxDef = append(lay.maxDef, def)
	}
	if !keyFound {
		return lay, schemaErr("key", "missing (want binary key)")
	}
	return lay, nil
}

// columnOrder sorts columns as a read presents them: family, qualifier.
func columnOrder(a, b Column) int {
	return cell.CompareColumns(a.Family, a.Qualifier, b.Family, b.Qualifier)
}
