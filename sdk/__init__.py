"""Keybus client SDK: producer, reader (and, as they land, consumer, Databus
callback consumer and event processor).

`sdk.core` is the lowest layer of the project: the wire contract (generated
protobuf code) and the rules the broker and clients share (hash slot, hash
ranges, columns, filters). It imports nothing else from Keybus.
"""
