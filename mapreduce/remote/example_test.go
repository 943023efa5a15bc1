package remote_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/jobs"
	"github.com/tabuladb/tabula/mapreduce/remote"
	"github.com/tabuladb/tabula/storage/coord"
)

// A Go program runs a registered job on the `tabula worker`s of a cluster:
// it finds them through the cluster's Consul, waits for enough of them,
// and hands them to Run. The workers rebuild the job by its registered
// name, so the job must be registered in their binary too (package jobs's
// built-in jobs are in tabula's).
func Example() {
	ctx := context.Background()
	lock, err := coord.NewConsul(coord.ConsulConfig{Address: "127.0.0.1:8500", Prefix: coord.ClusterPrefix("local")})
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Close()
	pool, err := remote.NewConsulPool(lock, remote.PoolOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	workers, err := pool.WaitWorkers(wctx, 2)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	job, err := mapreduce.Build("rowcounter", jobs.Conf(jobs.RowCounterConf{Input: jobs.TableSpec{Table: "webtable"}}))
	if err != nil {
		log.Fatal(err)
	}
	res, err := mapreduce.Run(ctx, job, mapreduce.Config{Addr: "127.0.0.1:8086", Workers: workers})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Counters[jobs.CounterRows])
}
