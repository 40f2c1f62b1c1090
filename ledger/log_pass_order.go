package ledger

// This file puts each poll's rows, read in the table's order, in the order
// of the poll's leaves for its hasher (log_pass.go): a row whose leaf is
// next goes to the hasher's batch, one that came early waits (aheadRows,
// or pending when it came out of seq order too), and a poll whose rows do
// not line up with its leaves is left to the per-poll check.

// take is the poll's next row in the table's order, whose answer's
// number is answer: hashed when its leaf is next, else held until it is:
// in ahead when it comes after the rows held there in seq order (as
// nearly all do), else in pending.
func (pp *passPoll) take(r *rawRow, answer int32, fpWrong bool) {
	pp.rows++
	if pp.next >= len(pp.seqs) || pp.seqs[pp.next] != r.seq {
		if len(pp.pending)+pp.ahead.len() >= passPending {
			pp.fail()
			return
		}
		if last, ok := pp.ahead.last(); !ok || r.seq > last {
			var row passRow
			row, pp.ahead.text = layRow(pp.ahead.text, r, answer, fpWrong)
			pp.ahead.rows = append(pp.ahead.rows, row)
			return
		}
		row, text := layRow(make([]byte, 0, len(r.answer)+len(r.principal)+len(r.key)), r, answer, fpWrong)
		pp.pending[r.seq] = heldRow{row: row, text: text}
		return
	}
	var row passRow
	row, pp.text = layRow(pp.textRoom(), r, answer, fpWrong)
	pp.emit(row)
	pp.catchUp()
}

// textRoom is the batch's text, made when it is not, for the rows of a
// batch (batchRoom).
func (pp *passPoll) textRoom() []byte {
	if pp.text == nil {
		pp.text = make([]byte, 0, passText/passBatch*pp.batchRoom())
	}
	return pp.text
}

// batchRoom is the rows a new batch is made for: passBatch, or the
// poll's leaves still to emit when they are fewer. A pass over many small
// polls then holds a small batch for each, not passBatch rows.
func (pp *passPoll) batchRoom() int { return max(1, min(passBatch, len(pp.seqs)-pp.next)) }

// layRow appends r's text to text and returns r as a passRow of it.
func layRow(text []byte, r *rawRow, answer int32, fpWrong bool) (passRow, []byte) {
	row := passRow{seq: r.seq, received: r.received, answer: answer, start: int32(len(text)), fpWrong: fpWrong}
	if answer < 0 {
		text = append(text, r.answer...)
	}
	row.a = int32(len(text))
	text = append(text, r.principal...)
	row.p = int32(len(text))
	text = append(text, r.key...)
	row.end = int32(len(text))
	return row, text
}

// catchUp emits the leaves that are next and at hand: definitions, and
// rows held until their turn. A row first in ahead whose seq is below the
// next leaf's is not next (its leaf comes later, or it has none): it moves
// to pending, so the rows behind it in ahead are not held up by it.
func (pp *passPoll) catchUp() {
	for pp.next < len(pp.seqs) && !pp.failed {
		seq := pp.seqs[pp.next]
		if seq < 0 {
			d := pp.defs[-seq]
			if d == nil || d.PollID != pp.id {
				pp.fail() // the per-poll check names the leaf
				return
			}
			pp.emit(passRow{seq: seq})
			continue
		}
		if row, text, ok := pp.ahead.first(); ok && row.seq <= seq {
			if row.seq == seq {
				pp.emitHeld(row, text)
			} else {
				pp.pending[row.seq] = heldRow{row: rebased(row, -row.start), text: append([]byte(nil), text...)}
			}
			pp.ahead.pop() // after its text is copied: pop may move the text
			continue
		}
		held, ok := pp.pending[seq]
		if !ok {
			return
		}
		delete(pp.pending, seq)
		pp.emitHeld(held.row, held.text)
	}
}

// emitHeld emits a held row whose text, from its row.start, is text.
func (pp *passPoll) emitHeld(row passRow, text []byte) {
	row = rebased(row, int32(len(pp.text))-row.start)
	pp.text = append(pp.textRoom(), text...)
	pp.emit(row)
}

// rebased is r with its text moved by d bytes.
func rebased(r passRow, d int32) passRow {
	r.start, r.a, r.p, r.end = r.start+d, r.a+d, r.p+d, r.end+d
	return r
}

// aheadRows are a poll's rows come before their leaf's turn, in the order
// they came, which is seq order, their text one after another.
type aheadRows struct {
	rows []passRow
	head int // rows before it are gone
	text []byte
}

func (h *aheadRows) len() int { return len(h.rows) - h.head }

// last is the seq of the row held last.
func (h *aheadRows) last() (int64, bool) {
	if h.len() == 0 {
		return 0, false
	}
	return h.rows[len(h.rows)-1].seq, true
}

// first is the row held first and its text.
func (h *aheadRows) first() (passRow, []byte, bool) {
	if h.len() == 0 {
		return passRow{}, nil, false
	}
	r := h.rows[h.head]
	return r, h.text[r.start:r.end], true
}

// pop lets the first row go; the space of the rows gone is taken back
// once they are most of it.
func (h *aheadRows) pop() {
	h.head++
	switch {
	case h.head == len(h.rows):
		h.rows, h.head, h.text = h.rows[:0], 0, h.text[:0]
	case h.head >= 1024 && 2*h.head >= len(h.rows):
		base := h.rows[h.head].start
		h.text = h.text[:copy(h.text, h.text[base:])]
		n := copy(h.rows, h.rows[h.head:])
		h.rows, h.head = h.rows[:n], 0
		for i := range h.rows {
			h.rows[i] = rebased(h.rows[i], -base)
		}
	}
}

// emit hands the row of the next leaf, its text already in pp.text, to
// the poll's hasher. After the poll's last leaf the hasher is told it has
// every row, so that it ends while the pass goes on.
func (pp *passPoll) emit(r passRow) {
	if pp.batch == nil {
		pp.batch = make([]passRow, 0, pp.batchRoom())
	}
	pp.next++
	pp.batch = append(pp.batch, r)
	switch {
	case pp.next == len(pp.seqs):
		pp.flush()
		pp.close()
	case len(pp.batch) == cap(pp.batch):
		pp.flush()
	}
}

// flush sends the rows emitted so far to the hasher, starting it on the
// first.
func (pp *passPoll) flush() {
	if len(pp.batch) == 0 {
		return
	}
	if pp.work == nil {
		pp.work, pp.spares, pp.done = make(chan passWork, 2), make(chan passWork, passSpares), make(chan struct{})
		go pp.hash()
	}
	pp.work <- passWork{rows: pp.batch, text: pp.text, answers: pp.answers}
	pp.batch, pp.text = nil, nil // made again by the next emit, unless a spare comes back
	select {
	case w := <-pp.spares:
		pp.batch, pp.text = w.rows, w.text
	default:
	}
}

// fail leaves the poll to the per-poll check.
func (pp *passPoll) fail() {
	pp.failed, pp.pending, pp.ahead, pp.batch, pp.text = true, nil, aheadRows{}, nil, nil
	pp.stop()
}

// close tells the hasher, if it runs, that it has every row; stop waits
// for it.
func (pp *passPoll) close() {
	if pp.work != nil && !pp.closed {
		close(pp.work)
		pp.closed = true
	}
}

// stop ends the hasher, if it runs, and waits for it.
func (pp *passPoll) stop() {
	if pp.work != nil {
		pp.close()
		<-pp.done
		pp.work = nil
	}
}
