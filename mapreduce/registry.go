package mapreduce

import (
	"fmt"
	"slices"
	"sync"
)

// Builder builds a job from its configuration bytes (whatever the job
// chose, typically JSON of its own config struct). It must be
// deterministic: the coordinator and every worker build the job from the
// same bytes and must get the same job. A conf it refuses is an error that
// names the bad field.
type Builder func(conf []byte) (*Job, error)

// JobInfo describes a registered job.
type JobInfo struct {
	Name  string
	Usage string // one line: arguments and what the job does
	Build Builder
}

var registry struct {
	sync.RWMutex
	jobs map[string]JobInfo
}

// Register makes a job known by name to this process: the CLI (tabula mr
// run NAME) and workers (which rebuild it from the name and conf bytes of
// a task). Packages register their jobs in init. Registering a name twice
// panics.
func Register(name, usage string, build Builder) {
	registry.Lock()
	defer registry.Unlock()
	if registry.jobs == nil {
		registry.jobs = map[string]JobInfo{}
	}
	if _, dup := registry.jobs[name]; dup {
		panic(fmt.Sprintf("mapreduce: job %q registered twice", name))
	}
	registry.jobs[name] = JobInfo{Name: name, Usage: usage, Build: build}
}

// Lookup returns the registered job name.
func Lookup(name string) (JobInfo, bool) {
	registry.RLock()
	defer registry.RUnlock()
	j, ok := registry.jobs[name]
	return j, ok
}

// Jobs lists the registered jobs by name.
func Jobs() []JobInfo {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]JobInfo, 0, len(registry.jobs))
	for _, j := range registry.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b JobInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Build builds the registered job name from conf and stamps it with its
// name and conf.
func Build(name string, conf []byte) (*Job, error) {
	info, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("mapreduce: unknown job %q (tabula mr jobs lists them)", name)
	}
	j, err := info.Build(conf)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", name, err)
	}
	j.Name, j.Conf = name, conf
	return j, nil
}
