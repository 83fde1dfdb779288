"""Operations: one module per maintenance command, each a plan and an execute step over a Store."""
