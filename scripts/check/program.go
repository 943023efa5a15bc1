// Package check type-checks a parsed script and resolves every name, so
// that what runs afterwards need not look anything up: each variable has a
// slot, each table an index, each expression a static type. Errors are
// collected, all of them, with the position they are about.
package check

import (
	"fmt"
	"sort"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// Error is one diagnostic: a syntax or type error at a position.
type Error struct {
	Pos syntax.Pos
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("%v: %s", e.Pos, e.Msg) }

// ObjKind says what a name denotes.
type ObjKind int

// The kinds of named things.
const (
	VarObj     ObjKind = iota // a variable (global, local or parameter)
	StaticObj                 // a static: initialized once per run, then read-only
	TableObj                  // an aggregator table
	FuncObj                   // a function
	TypeObj                   // a type name
	BuiltinObj                // an intrinsic function
	hiddenObj                 // a quantified variable of "all", not usable in the body
)

// Object is what a name denotes.
type Object struct {
	Kind ObjKind
	Name string
	Pos  syntax.Pos
	// Type of a variable, static or type name.
	Type *value.Type
	// Global is true for variables declared outside functions: they live in
	// the run's global slots, the others in the frame of their function.
	Global bool
	// Slot is the variable's index among the globals, statics or the
	// function's frame; the table's index in Program.Tables; the function's
	// index in Program.Funcs.
	Slot int
	// ReadOnly variables (input, statics) cannot be assigned.
	ReadOnly bool
	Func     *Func
	Table    *Table
}

// Func is a function declared in the script.
type Func struct {
	Name   string
	Decl   *syntax.DeclStmt
	Params []*Object
	Result *value.Type // nil when it returns no value
	// FrameSize is the number of slots its parameters and locals need.
	FrameSize int
	Index     int
}

// Table is a declared aggregator table.
type Table struct {
	Name string
	Pos  syntax.Pos
	// Kind is the aggregator: collection, sum, mean, maximum, minimum, top,
	// unique, quantile, sample; or keep for the predeclared filter table.
	Kind   string
	Param  int           // the n of maximum(n) and the like, 0 when absent
	Index  []value.Field // index names and types
	Elem   value.Field   // what is emitted
	Weight *value.Field  // the weight type, nil when the table has none
}

// When is what the checker learned about a when statement: its quantified
// variables and, for each, the containers (arrays or maps indexed by it in
// the condition) whose indexes or keys it ranges over.
type When struct {
	Quant  syntax.Token
	Vars   []*Object
	Ranges [][]syntax.Expr
}

// Program is a checked script: the tree plus everything resolved about it.
type Program struct {
	File *syntax.File
	// Types holds the type of every expression that has a value.
	Types map[syntax.Expr]*value.Type
	// Uses maps every identifier that refers to something to it; Defs maps
	// every declared identifier to the object it declares.
	Uses map[*syntax.Ident]*Object
	Defs map[*syntax.Ident]*Object
	// Consts holds the value of every literal.
	Consts map[*syntax.BasicLit]value.Value
	// Whens holds the analysis of each when statement.
	Whens map[*syntax.WhenStmt]*When
	// Tables are the declared tables in declaration order (not keep).
	Tables []*Table
	Funcs  []*Func
	// NumGlobals and NumStatics are the number of slots to allocate.
	NumGlobals int
	NumStatics int
	// UsesKeep reports whether the script emits to keep, i.e. is a filter.
	UsesKeep bool
	// UsesCells reports whether the script reads input.cells, which is
	// then built for each row; otherwise only input.key is.
	UsesCells bool
}

// InputType is the type of the predeclared variable input: one row.
var InputType = &value.Type{Kind: value.Tuple, Name: "Row", Fields: []value.Field{
	{Name: "key", Type: value.BytesType},
	{Name: "cells", Type: value.ArrayOf(value.CellType)},
}}

// The index of the input's fields, and its global slot.
const (
	InputKey   = 0
	InputCells = 1
	InputSlot  = 0
)

// KeepTable is the predeclared table a filter emits true to in order to
// keep the current row.
const KeepTable = "keep"

// Check type-checks f. It returns the checked program, or every error found,
// sorted by position.
func Check(f *syntax.File) (*Program, []*Error) {
	c := newChecker(f)
	c.file(f)
	if len(c.errs) > 0 {
		sort.SliceStable(c.errs, func(i, j int) bool {
			a, b := c.errs[i].Pos, c.errs[j].Pos
			return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
		})
		return nil, c.errs
	}
	return c.prog, nil
}
