; A Python builtin compiled from IR (adcore.calling.fastcall): "name"(self, args, nargs),
; whose entry block's lines are "body", with its status (starting at "refused") and the
; exception of a failed call in globals that "name".state() and "name".excinfo() return.
declare void @Py_IncRef(ptr)
$declarations
@excinfo = internal global ptr null
@status = internal global i32 $refused
define ptr @$name.state() {
  ret ptr @status
}
define ptr @$name.excinfo() {
  ret ptr @excinfo
}
define ptr @$name(ptr %self, ptr %args, i64 %nargs) {
entry:
$body
}
