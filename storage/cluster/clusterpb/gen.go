// Package clusterpb holds the generated Go code of Tabula's cluster
// protocol (cluster.proto): the master's control of tablet servers, the
// servers' split reports, and the clients' entry to the location
// hierarchy; and the forced tablet operations (tabletops.proto).
package clusterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative cluster.proto tabletops.proto
