"""Go semantics the reference scorer has, reproduced byte for byte: fmt's number and string formatting, yaml.v3's decoding and emitting."""
