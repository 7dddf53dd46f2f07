package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// cpioEntry is one file of the initramfs.
type cpioEntry struct {
	mode         uint32 // type and permission bits (syscall.S_IF* | perm)
	data         []byte // file content, or a symlink's target
	from         string // file content read from this path (when data is nil)
	major, minor uint32 // device numbers of a character device
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
)

// writeCPIO writes files (path without leading slash → entry) as an uncompressed "newc"
// archive, the format the kernel unpacks as initramfs. Parents come before children.
func writeCPIO(w io.Writer, files map[string]cpioEntry) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	ino := uint32(1)
	for _, name := range names {
		e := files[name]
		data := e.data
		if data == nil && e.from != "" {
			b, err := os.ReadFile(e.from)
			if err != nil {
				return err
			}
			data = b
		}
		if err := writeCPIOEntry(w, ino, name, e, data); err != nil {
			return err
		}
		ino++
	}
	return writeCPIOEntry(w, ino, "TRAILER!!!", cpioEntry{}, nil)
}

func writeCPIOEntry(w io.Writer, ino uint32, name string, e cpioEntry, data []byte) error {
	nlink := uint32(1)
	if e.mode&0o170000 == sIFDIR {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.mode, 0, 0, nlink, 0, len(data), 0, 0, e.major, e.minor, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := pad4(w, len(hdr)+len(name)+1); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return pad4(w, len(data))
}

func pad4(w io.Writer, n int) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
