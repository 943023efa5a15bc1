// Package doccheck holds tests that keep the repository's documents true to
// the code: every `Name` (`file`) pair in docs/architecture.md names a
// declaration that exists in that file, and every repository path the
// documents name exists. It has no code of its own.
package doccheck
