"""Skim Produce and Fetch frames by their lengths instead of decoding them.

Why. The data path's frames are mostly record batches the proxy never reads
(``docs/design.md#forwarded-untouched``); decoding them whole to look at a few fields cost most
of the proxy's CPU per consumed message (bench/RESULTS.md, issue 13). What the proxy needs:

* **Responses that may carry broker addresses.** Fetch v16+ and Produce v10+ responses may end
  with the KIP-951 ``node_endpoints`` tagged field (tag 0 of the top-level tagged fields). It is
  found by walking the frame's structure by lengths and rewritten in the tail alone
  (:mod:`.tails`); the records are never touched. A large Fetch response is walked *as it
  streams* (:class:`~.tails.TailStream`): every byte before the tail goes to the client as it
  arrives, and the tail, rewritten to the same length, goes last.
* **Produce requests**: topics, partitions, ``acks`` and the transactional id for authorization
  (:mod:`.produce`), the record batches left as views of the original frame.
* **ShareFetch and ShareAcknowledge responses**: their partitions, so that one is decoded only
  when the proxy must change it (:mod:`.share`).
* **Metadata requests and responses** (issue 39): the request's topics and flags for the
  handler, and the response rebuilt from its own bytes when the proxy lets the request through
  whole, its broker addresses and KIP-430 fields spliced in (:mod:`.metadata`): decoding and
  re-encoding it cost most of a Metadata round trip.

What every walk reads by (varints, lengths, tagged fields at a position) is in :mod:`.reading`.

Read as Kafka reads. Every walk follows the generated readers' rules (as :mod:`guard` does for
decoded frames): varints as ``ByteUtils.readUnsignedVarint``'s Java ``int`` (bits beyond 32
dropped), compact lengths ``readUnsignedVarint() - 1`` in ``int`` arithmetic, any negative
length or count null, a negative tagged-field count no field, unknown tagged fields skipped
by their size (a negative size refused), bytes after a request's body ignored.

Fail closed. A walk that cannot make sense of a buffered frame answers ``None`` and the caller
decodes it whole as before (the Metadata walk also for a frame it does not take on: any tagged
field, a string that is not UTF-8); a streamed response that turns out malformed raises
:class:`~kafkaguard.protocol.errors.MalformedFrame` before its tail leaves, so a
``node_endpoints`` field is never passed on unrewritten. No I/O (sans-I/O, like the rest of
:mod:`kafkaguard.protocol`).
"""
