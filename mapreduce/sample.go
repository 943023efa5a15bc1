package mapreduce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// SampleKeys runs the job's Map, in this process, over the first
// rowsPerSplit rows of every split of its table input and returns the keys
// it emits: the sample TotalOrderPartitioner's bounds are picked from, as
// Hadoop's InputSampler does. Only jobs with a table input and a Map can be
// sampled.
func SampleKeys(ctx context.Context, job *Job, cfg Config, rowsPerSplit int) ([][]byte, error) {
	in, ok := job.Input.(*TableInput)
	if !ok || job.Map == nil {
		return nil, errors.New("mapreduce: only a job with a table input and a Map can be sampled")
	}
	pool := NewClientPool(cfg.Client)
	defer pool.Close()
	c, err := pool.Get(addrOr(in.Addr, cfg.Addr))
	if err != nil {
		return nil, err
	}
	splits, err := tableSplits(ctx, c, in)
	if err != nil {
		return nil, err
	}
	spec := JobSpec{Name: job.Name, Addr: cfg.Addr, Project: cfg.Client.Project, Instance: cfg.Client.Instance,
		ReadTime: time.Now().UnixMilli() * 1000, Reducers: job.Reducers, Maps: len(splits)}
	sc := &sampleContext{clients: pool.Get}
	for i, sp := range splits {
		sc.task = Task{Job: spec, Attempt: AttemptID{Job: "sample", Kind: MapTask, Task: i}, Split: &sp}
		opts := in.ScanOptions(sc.task)
		opts.Limit = int64(rowsPerSplit)
		s := c.Scan(ctx, spec.TableName(sp.Table), opts)
		for s.Next() {
			if err := job.Map(ctx, s.Row(), sc); err != nil {
				s.Close()
				return nil, fmt.Errorf("sample of split %d: %w", i, err)
			}
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
	}
	return sc.keys, nil
}

// TotalOrder samples the job's map keys (SampleKeys) and sets its
// partitioner to a TotalOrderPartitioner over them, so that the reducers'
// outputs, in partition order, are globally sorted. Run sends the bounds
// with every task (JobSpec.PartitionBounds), so workers in other
// processes, which rebuild the job from its name and configuration,
// partition alike.
func TotalOrder(ctx context.Context, job *Job, cfg Config, rowsPerSplit int) error {
	keys, err := SampleKeys(ctx, job, cfg, rowsPerSplit)
	if err != nil {
		return err
	}
	job.Partition = TotalOrderPartitioner{Bounds: SampleBounds(keys, job.Reducers)}
	return nil
}

// sampleContext collects what a sampled Map emits.
type sampleContext struct {
	task    Task
	keys    [][]byte
	clients func(string) (*client.Client, error)
}

func (s *sampleContext) Emit(key, _ []byte) error {
	s.keys = append(s.keys, bytes.Clone(key))
	return nil
}
func (s *sampleContext) Write(cell.Row) error {
	return errors.New("mapreduce: a map-only job has no keys to sample")
}
func (s *sampleContext) Count(string, int64) {}
func (s *sampleContext) Report([]byte)       {}
func (s *sampleContext) Task() Task          { return s.task }
func (s *sampleContext) Client(addr string) (*client.Client, error) {
	return s.clients(addrOr(addr, s.task.Job.Addr))
}
