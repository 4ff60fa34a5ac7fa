"""Operations that show themselves: worker metrics, traces through the stream, progress bars."""
