// Package tabletpb holds the generated Go code of tabula.tablet.v1
// (tablet.proto): the typed detail a tablet server attaches to the
// FAILED_PRECONDITION it answers for a row or tablet it does not serve, so
// that a client knows which location to drop from its cache and retry.
package tabletpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative tablet.proto
