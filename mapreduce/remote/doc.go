// Package remote runs MapReduce task attempts in other processes: `tabula
// worker` processes, tablet servers started with --worker, and tabula dev.
//
// The worker side is a Service (the gRPC worker protocol of package
// workerpb, around an in-process mapreduce.LocalWorker that keeps map
// outputs on the worker's disk) and, for a process of its own, a Worker,
// which serves it and registers it in the cluster's lock service under
// PrefixWorkers with a session: a worker is alive while its key is locked.
//
// The coordinator's side is a Pool of Clients, each a mapreduce.Worker
// over a connection. A pool follows the registrations in the lock service
// (NewConsulPool) or a fixed list of addresses (NewStaticPool) and asks
// every worker for a heartbeat; a worker that unregisters, whose session
// ends, that stops answering for LostAfter, or that restarted (another name
// answers at its address) is lost: its Client's Lost channel closes, its
// running attempts fail, and the coordinator's scheduler re-runs what it
// held. Reducers fetch map outputs worker to worker (FetchPartition,
// streamed in chunks and resumed after a transient break); the coordinator
// sends each reduce attempt the addresses of the workers it fetches from.
//
// A job's intermediate data is the job's alone: every task carries its job
// token (mapreduce.JobSpec.Token, a secret the coordinator issues per run),
// a worker admits a job's attempts only with the token its first attempt
// brought, and serves the job's map outputs, kills its attempts and
// forgets it only for callers presenting the token (JobTokenKey): the
// coordinator and the job's reducers. Tasks read and write tables with
// their submitter's bearer token, which the coordinator sends with every
// call.
//
// The package imports no storage engine package: tasks reach tables through
// mapreduce's clients.
package remote
