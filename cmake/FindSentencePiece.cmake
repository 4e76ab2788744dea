# Finds SentencePiece (https://github.com/google/sentencepiece), the tokenizer library behind
# kpipe-prepare --tokenizer bpe. Debian: libsentencepiece-dev. Defines:
#   SentencePiece_FOUND, SentencePiece_VERSION (from pkg-config, where it has one)
#   SentencePiece::sentencepiece        encoding and decoding (SentencePieceProcessor)
#   SentencePiece::sentencepiece_train  training (SentencePieceTrainer); links the former
# Hints: SentencePiece_ROOT (CMake's <Package>_ROOT), CMAKE_PREFIX_PATH.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_SentencePiece QUIET sentencepiece)
endif()
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h HINTS ${PC_SentencePiece_INCLUDE_DIRS})
find_library(SentencePiece_LIBRARY sentencepiece HINTS ${PC_SentencePiece_LIBRARY_DIRS})
find_library(SentencePiece_TRAIN_LIBRARY sentencepiece_train HINTS ${PC_SentencePiece_LIBRARY_DIRS})
set(SentencePiece_VERSION ${PC_SentencePiece_VERSION})

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR
  VERSION_VAR SentencePiece_VERSION)

if(SentencePiece_FOUND AND NOT TARGET SentencePiece::sentencepiece)
  add_library(SentencePiece::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES IMPORTED_LOCATION ${SentencePiece_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${SentencePiece_INCLUDE_DIR})
  add_library(SentencePiece::sentencepiece_train UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece_train PROPERTIES IMPORTED_LOCATION ${SentencePiece_TRAIN_LIBRARY}
                        INTERFACE_LINK_LIBRARIES SentencePiece::sentencepiece)
endif()
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY)
