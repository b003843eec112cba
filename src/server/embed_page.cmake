# Writes OUT: a C++ header holding the text of IN as kChatPage (the web page served at /).
file(READ ${IN} text)
file(WRITE ${OUT} "// Generated from src/server/web/chat.html by src/server/embed_page.cmake; do not edit.\n#pragma once\n#include <string_view>\nnamespace deltabit::server {\ninline constexpr std::string_view kChatPage = R\"deltabit_page(${text})deltabit_page\";\n}\n")
