package sstable

import (
	"errors"
	"fmt"
)

// ErrCorrupt is matched (errors.Is) by every *CorruptionError.
var ErrCorrupt = errors.New("sstable: corrupt")

// CorruptionError reports bytes of a file that are not a valid SSTable.
type CorruptionError struct {
	File   string
	Offset int64 // offset in the file of the bad block (or footer)
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("sstable %s: corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// errCorruptBlock is the file-less form of a corruption found while decoding
// one block's bytes; the caller, which knows the file and offset, turns it
// into a *CorruptionError with corruptAt.
type errCorruptBlock string

func (e errCorruptBlock) Error() string { return string(e) }

func corruptf(format string, args ...any) error {
	return errCorruptBlock(fmt.Sprintf(format, args...))
}

// corruptAt names the file and offset in err when it is a block decoding
// error, and returns any other error unchanged.
func corruptAt(file string, off int64, err error) error {
	var ce errCorruptBlock
	if errors.As(err, &ce) {
		return &CorruptionError{File: file, Offset: off, Reason: string(ce)}
	}
	return err
}
