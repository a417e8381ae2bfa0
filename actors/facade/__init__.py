"""The facades: the Dispatcher, the ProcessDispatcher, the EventRecorder."""
