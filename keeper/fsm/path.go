package fsm

import "unicode/utf8"

// validPath applies ZooKeeper's PathUtils.validatePath.
func validPath(path string) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	if len(path) == 1 {
		return true
	}
	if path[len(path)-1] == '/' {
		return false
	}
	var last rune = '/'
	var beforeLast rune
	for i, c := range path {
		if i == 0 {
			continue
		}
		next := byte('/')
		if j := i + utf8.RuneLen(c); j < len(path) {
			next = path[j]
		}
		switch {
		case c == 0:
			return false
		case c == '/' && last == '/':
			return false
		case c == '.' && last == '.' && beforeLast == '/' && next == '/':
			return false
		case c == '.' && last == '/' && next == '/':
			return false
		case c == utf8.RuneError,
			c > 0 && c <= 0x1f, c >= 0x7f && c <= 0x9f,
			c >= 0xd800 && c <= 0xf8ff, c >= 0xfff0 && c <= 0xffff,
			c > 0xffff: // Java sees a surrogate pair, in the range above
			return false
		}
		beforeLast, last = last, c
	}
	return true
}
