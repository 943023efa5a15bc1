package mapreduce

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestAttemptIDRoundTrip(t *testing.T) {
	for _, a := range []AttemptID{
		{Job: "wordcount-20261125-abc", Kind: MapTask, Task: 3, Attempt: 1},
		{Job: "j", Kind: ReduceTask, Task: 123456, Attempt: 0},
	} {
		got, err := ParseAttemptID(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAttemptID(%q) = %+v, %v; want %+v", a.String(), got, err, a)
		}
	}
	for _, bad := range []string{"", "j-x-1-1", "j-m-a-1", "j-m-1--1", "m-1-1"} {
		if _, err := ParseAttemptID(bad); err == nil {
			t.Errorf("ParseAttemptID(%q) succeeded", bad)
		}
	}
}

// TestTaskJSON: a Task survives JSON, as mapreduce/remote sends it.
func TestTaskJSON(t *testing.T) {
	task := Task{
		Job:        JobSpec{ID: "x-1", Name: "wordcount", Conf: []byte(`{"table":"webtable"}`), Addr: "h:1", ReadTime: 5, Timestamp: 7, Reducers: 2},
		Attempt:    AttemptID{Job: "x-1", Kind: ReduceTask, Task: 1, Attempt: 2},
		Split:      &Split{Table: "t", Start: []byte{0, 1}, End: []byte("z"), Server: "h:2", Host: "h", EstimatedBytes: 9},
		Partition:  1,
		MapOutputs: []MapOutputLocation{{Map: 0, Attempt: AttemptID{Job: "x-1", Task: 0}, Worker: "w0"}},
	}
	b, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	var back Task
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, task) {
		t.Errorf("round trip: got %+v, want %+v", back, task)
	}
}
