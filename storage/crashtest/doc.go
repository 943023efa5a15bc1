// Package crashtest holds the storage engine's crash test: a writer runs as a
// subprocess against a tablet on a local directory (SSTables, state and
// commit log), is killed with SIGKILL at random moments — mid-write,
// mid-flush, mid-compaction — and after every kill the test reopens the
// tablet and checks that every acknowledged write is there and no row
// mutation is half-applied.
//
// The package has no API; Writer is exported so the test binary can run it
// as its own subprocess.
package crashtest
