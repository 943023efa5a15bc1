// Package scriptpb holds the generated Go code of Tabula's script service
// tabula.scripts.v1.Scripts (scripts.proto): running a client's script
// inside a tablet server, over the rows of the tablets it holds.
package scriptpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative scripts.proto
