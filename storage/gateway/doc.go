// Package gateway is the data API of a tablet server in a cluster: the
// whole google.bigtable.v2.Bigtable service for every table, serving the
// rows of the tablets this server holds through its own
// tabletserver.DataService and forwarding the rest, once, to their owners,
// so that any Cloud Bigtable client that knows one server's address
// (BIGTABLE_EMULATOR_HOST) reaches the whole cluster. Gateway's comment
// states the routing of each method and the retry rules.
//
// It finds owners with the Go client's routing (ClientLocator: the
// location cache over METADATA of storage/client) and talks to them with
// the data API itself; of the tablet server it uses only the DataService's
// exported methods. tabula dev, one server holding every tablet, has no
// gateway.
package gateway
